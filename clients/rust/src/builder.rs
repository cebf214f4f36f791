//! Connecting: address, TLS, deadlines, the retry policy, nodes by reference.

use std::time::Duration;

use gpusched_api::v1::inventory_service_client::InventoryServiceClient;
use gpusched_api::v1::placement_service_client::PlacementServiceClient;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::client::Client;
use crate::error::Error;
use crate::retry::RetryPolicy;

/// TLS settings: the CA that signs the server's certificate, and optionally a client identity
/// (mutual TLS).
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// CA certificate(s), PEM.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate chain and key, PEM (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Name to verify the server certificate against (default: the address's host).
    pub domain: Option<String>,
}

/// Builds a [`Client`].
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    addr: String,
    tls: Option<TlsOptions>,
    timeout: Option<Duration>,
    connect_timeout: Duration,
    retry: RetryPolicy,
    max_message_bytes: usize,
    by_reference: bool,
}

impl ClientBuilder {
    /// A client of the server at `addr` (`http://host:port`, `https://...`, or `host:port`).
    pub fn new(addr: impl Into<String>) -> Self {
        ClientBuilder {
            addr: addr.into(),
            tls: None,
            timeout: Some(Duration::from_secs(10)),
            connect_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            max_message_bytes: 64 << 20,
            by_reference: true,
        }
    }

    /// Use TLS (and mutual TLS when an identity is given).
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Deadline of every call (None: no deadline).
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Limit for establishing the connection.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Retry policy for `UNAVAILABLE`.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Largest message sent or received.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Send nodes by reference (on by default): each node's inventory and usage go as SHA-256
    /// digests once the server has acknowledged them on this client, inline otherwise, and are
    /// resent inline when the server reports them missing (after a restart, on another
    /// replica, after eviction). Off: nodes always go whole, as before. Nodes go whole until a
    /// PlacementService answer on this client carried the `gpusched-node-refs` response header
    /// (a server that knows `node_refs`), so an older server is never sent references.
    pub fn by_reference(mut self, on: bool) -> Self {
        self.by_reference = on;
        self
    }

    /// A client over an existing channel (e.g. `Channel::balance_list` over replicas).
    pub fn with_channel(&self, channel: tonic::transport::Channel) -> Client {
        self.client(channel)
    }

    fn endpoint(&self) -> Result<Endpoint, Error> {
        let uri = if self.addr.contains("://") {
            self.addr.clone()
        } else if self.tls.is_some() {
            format!("https://{}", self.addr)
        } else {
            format!("http://{}", self.addr)
        };
        let mut ep = Endpoint::from_shared(uri.clone())
            .map_err(|_| Error::Endpoint(uri))?
            .connect_timeout(self.connect_timeout);
        if let Some(tls) = &self.tls {
            let mut cfg = ClientTlsConfig::new();
            if let Some(ca) = &tls.ca_pem {
                cfg = cfg.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &tls.identity {
                cfg = cfg.identity(Identity::from_pem(cert, key));
            }
            if let Some(d) = &tls.domain {
                cfg = cfg.domain_name(d.clone());
            }
            ep = ep.tls_config(cfg).map_err(|e| Error::Tls(e.to_string()))?;
        }
        Ok(ep)
    }

    /// Connects now.
    pub async fn connect(self) -> Result<Client, Error> {
        let channel = self.endpoint()?.connect().await?;
        Ok(self.client(channel))
    }

    /// Connects and returns the configured channel itself (address, TLS, connect timeout), for
    /// callers that bring their own codec, such as the load tester sending pre-encoded requests.
    pub async fn connect_channel(&self) -> Result<tonic::transport::Channel, Error> {
        Ok(self.endpoint()?.connect().await?)
    }

    /// Connects on first use.
    pub fn connect_lazy(self) -> Result<Client, Error> {
        let channel = self.endpoint()?.connect_lazy();
        Ok(self.client(channel))
    }

    fn client(&self, channel: tonic::transport::Channel) -> Client {
        let placement = PlacementServiceClient::new(channel.clone())
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes);
        let inventory = InventoryServiceClient::new(channel)
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes);
        Client::new(
            placement,
            inventory,
            self.timeout,
            self.retry,
            self.by_reference,
        )
    }
}
