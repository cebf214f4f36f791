//! # gpusched-agent
//!
//! The node agent of gpusched: reads the node's GPUs through NVML ([`discovery`]), has the
//! gpusched service normalise them ([`inventory`]: split count, scaling and overrides come from
//! the service's configuration) and publishes the result where schedulers read it
//! ([`publish`]: HAMi's Node annotations, optionally the Node's GPU capacity, and/or a file in
//! JSON, HAMi or Slurm `gres.conf` form, see [`format`]). [`agent`] runs the loop, [`health`]
//! serves `/healthz`, `/readyz` and `/metrics` ([`metrics`]), [`config`] layers defaults, file, environment and flags.

pub mod agent;
pub mod config;
pub mod discovery;
pub mod format;
pub mod health;
pub mod inventory;
pub mod metrics;
pub mod publish;

impl discovery::GpuSource for Box<dyn discovery::GpuSource> {
    fn read(&mut self) -> Result<Vec<discovery::CardFacts>, discovery::DiscoveryError> {
        (**self).read()
    }

    fn changes(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        (**self).changes()
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}
