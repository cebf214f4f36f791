//! Plaintext, TLS and mutual TLS with certificates generated in the test (rcgen).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpusched_api::v1::placement_service_client::PlacementServiceClient;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

struct Pki {
    ca_pem: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki {
            ca_pem: issuer.pem(),
            issuer,
        }
    }

    /// (certificate PEM, key PEM) for these names.
    fn leaf(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

async fn tls_server(dir: &std::path::Path, pki: &Pki, client_ca: Option<&Pki>) -> TestServer {
    let (cert, key) = pki.leaf(&["localhost", "127.0.0.1"]);
    std::fs::write(dir.join("server.crt"), cert).unwrap();
    std::fs::write(dir.join("server.key"), key).unwrap();
    let crt = dir.join("server.crt").display().to_string();
    let key = dir.join("server.key").display().to_string();
    let mut overrides = vec![("tls.cert", crt.as_str()), ("tls.key", key.as_str())];
    let ca_path = dir.join("client-ca.crt").display().to_string();
    if let Some(ca) = client_ca {
        std::fs::write(&ca_path, &ca.ca_pem).unwrap();
        overrides.push(("tls.client_ca", ca_path.as_str()));
    }
    let running = gpusched_service::testing::start_server(&overrides).await;
    // The test server's plaintext channel is unused for TLS servers.
    let channel = Channel::from_shared(format!("http://{}", running.grpc_addr))
        .unwrap()
        .connect_lazy();
    TestServer { running, channel }
}

async fn call(addr: std::net::SocketAddr, tls: Option<ClientTlsConfig>) -> Result<(), String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Channel::from_shared(format!("{scheme}://{addr}")).unwrap();
    if let Some(t) = tls {
        endpoint = endpoint.tls_config(t).map_err(|e| e.to_string())?;
    }
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    PlacementServiceClient::new(channel)
        .allocate(allocate_req(
            vec![node("a", 1, 8000)],
            pod(&[], &[&[("nvidia.com/gpu", "1")]]),
        ))
        .await
        .map(|_| ())
        .map_err(|e| format!("call: {e:?}"))
}

fn client_tls(ca: &Pki) -> ClientTlsConfig {
    ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.ca_pem))
        .domain_name("localhost")
}

#[tokio::test]
async fn plaintext_by_default() {
    let server = TestServer::start(&[]).await;
    call(server.running.grpc_addr, None).await.unwrap();
}

#[tokio::test]
async fn server_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("gpusched test CA");
    let server = tls_server(dir.path(), &pki, None).await;
    let addr = server.running.grpc_addr;
    call(addr, Some(client_tls(&pki))).await.unwrap();
    assert!(
        call(addr, None).await.is_err(),
        "plaintext must not reach a TLS server"
    );
    let stranger = Pki::new("someone else");
    assert!(
        call(addr, Some(client_tls(&stranger))).await.is_err(),
        "an untrusted server certificate must fail"
    );
}

#[tokio::test]
async fn mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("gpusched test CA");
    let clients = Pki::new("gpusched client CA");
    let server = tls_server(dir.path(), &pki, Some(&clients)).await;
    let addr = server.running.grpc_addr;
    assert!(
        call(addr, Some(client_tls(&pki))).await.is_err(),
        "no client certificate"
    );
    let (cert, key) = clients.leaf(&["scheduler"]);
    call(
        addr,
        Some(client_tls(&pki).identity(Identity::from_pem(cert, key))),
    )
    .await
    .unwrap();
    let (cert, key) = pki.leaf(&["intruder"]);
    assert!(
        call(
            addr,
            Some(client_tls(&pki).identity(Identity::from_pem(cert, key)))
        )
        .await
        .is_err(),
        "a client certificate from another CA"
    );
}
