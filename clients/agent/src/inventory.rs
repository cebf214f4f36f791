//! Normalisation: raw card facts -> `InventoryService.NormalizeInventory` on the gpusched
//! service (split count, scaling and overrides come from the service's configuration), and
//! what is kept when the service cannot be reached.

use std::future::Future;
use std::time::Duration;

use gpusched_api::v1;
use gpusched_client::{ClientBuilder, TlsOptions};

use crate::discovery::CardFacts;
use gpusched_runtime::tls::ClientTlsFiles;

/// The request for `node` with these cards (no config: the service's own applies).
pub fn request(node: &str, cards: &[CardFacts]) -> v1::NormalizeInventoryRequest {
    v1::NormalizeInventoryRequest {
        node_name: node.to_owned(),
        cards: cards.iter().map(CardFacts::to_raw).collect(),
        config: None,
    }
}

/// A normalisation failure.
#[derive(Debug, thiserror::Error)]
pub enum NormalizeError {
    /// The service could not be reached or answered with an error.
    #[error("gpusched service: {0}")]
    Service(#[from] gpusched_client::Error),
    /// Anything else (fakes, setup).
    #[error("{0}")]
    Other(String),
}

/// Turns raw cards into the schedulable inventory.
pub trait Normalizer: Send + Sync {
    /// Normalises one node's cards.
    fn normalize(
        &self,
        req: v1::NormalizeInventoryRequest,
    ) -> impl Future<Output = Result<v1::NormalizeInventoryResponse, NormalizeError>> + Send;
}

/// The gpusched service, through `gpusched-client` (deadline per call, retry on UNAVAILABLE).
#[derive(Debug, Clone)]
pub struct ServiceNormalizer {
    client: gpusched_client::Client,
}

impl ServiceNormalizer {
    /// A client of `address`; connects on first use, so the agent starts while the service
    /// is down.
    pub fn connect_lazy(
        address: &str,
        tls: Option<&ClientTlsFiles>,
        timeout: Duration,
    ) -> Result<Self, NormalizeError> {
        let mut b = ClientBuilder::new(address).timeout(Some(timeout));
        if let Some(t) = tls {
            let pem = t.load().map_err(|e| NormalizeError::Other(e.to_string()))?;
            b = b.tls(TlsOptions {
                ca_pem: pem.ca,
                identity: pem.identity,
                domain: pem.domain,
            });
        }
        Ok(ServiceNormalizer {
            client: b.connect_lazy()?,
        })
    }
}

impl Normalizer for ServiceNormalizer {
    async fn normalize(
        &self,
        req: v1::NormalizeInventoryRequest,
    ) -> Result<v1::NormalizeInventoryResponse, NormalizeError> {
        Ok(self.client.normalize_inventory(req).await?)
    }
}

/// The last good inventory with the health of a fresh read applied: used while the service
/// cannot be reached, so a card that fails is never published as healthy. A card of the last
/// inventory that the fresh read no longer has is unhealthy; a new card waits for the service.
pub fn overlay_health(
    last: &v1::NormalizeInventoryResponse,
    fresh: &[CardFacts],
) -> v1::NormalizeInventoryResponse {
    let mut out = last.clone();
    for card in &mut out.cards {
        let healthy = fresh
            .iter()
            .find(|f| f.uuid == card.id)
            .is_some_and(CardFacts::healthy);
        card.health = if healthy {
            v1::CardHealth::Healthy
        } else {
            v1::CardHealth::Unhealthy
        } as i32;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(uuid: &str, healthy: bool) -> CardFacts {
        CardFacts {
            uuid: uuid.into(),
            index: 0,
            model_name: "NVIDIA T4".into(),
            total_memory_bytes: 16 << 30,
            numa: None,
            mig_enabled: false,
            mig: crate::discovery::MigState::Disabled,
            unhealthy_reasons: if healthy { vec![] } else { vec!["xid".into()] },
            links: vec![],
            pci_bus_id: None,
            minor_number: None,
            cpus: None,
            cores: None,
        }
    }

    fn card(id: &str, healthy: bool) -> v1::Card {
        v1::Card {
            id: id.into(),
            health: if healthy {
                v1::CardHealth::Healthy
            } else {
                v1::CardHealth::Unhealthy
            } as i32,
            slots: 10,
            ..Default::default()
        }
    }

    #[test]
    fn request_has_no_config_so_the_service_decides() {
        let r = request("n1", &[facts("GPU-a", true), facts("GPU-b", false)]);
        assert_eq!(r.node_name, "n1");
        assert!(r.config.is_none());
        assert_eq!(r.cards[1].health, v1::CardHealth::Unhealthy as i32);
    }

    #[test]
    fn overlay_applies_fresh_health_and_drops_vanished_cards_to_unhealthy() {
        let last = v1::NormalizeInventoryResponse {
            cards: vec![
                card("GPU-a", true),
                card("GPU-b", true),
                card("GPU-c", false),
            ],
            ..Default::default()
        };
        let out = overlay_health(
            &last,
            &[
                facts("GPU-a", false),
                facts("GPU-c", true),
                facts("GPU-new", true),
            ],
        );
        let health: Vec<i32> = out.cards.iter().map(|c| c.health).collect();
        assert_eq!(
            health,
            vec![
                v1::CardHealth::Unhealthy as i32,
                v1::CardHealth::Unhealthy as i32,
                v1::CardHealth::Healthy as i32
            ]
        );
        assert_eq!(out.cards.len(), 3);
    }
}
