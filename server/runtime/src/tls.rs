//! TLS from PEM files: the server side (certificate, key, optional client CA for mutual TLS)
//! and the client side (CA, optional identity). Errors name the file and the reason.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::error::ConfigError;

/// A PEM file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("TLS file {}: {reason}", path.display())]
pub struct TlsError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Reads a PEM file holding at least one certificate.
pub fn read_certificates(path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(path)?;
    let fail = |reason: String| TlsError {
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("no PEM certificate (BEGIN CERTIFICATE) in it".into()));
    }
    Ok(pem)
}

/// Reads a PEM file holding a private key (PKCS#8, PKCS#1 or SEC1).
pub fn read_private_key(path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError {
        path: path.to_owned(),
        reason: format!("no usable PEM private key: {e}"),
    })?;
    Ok(pem)
}

/// A rustls certificate and signing key from PEM files (servers built on rustls directly, such
/// as an HTTPS webhook that reloads its certificate).
pub fn certified_key(
    cert: &Path,
    key: &Path,
) -> Result<std::sync::Arc<rustls::sign::CertifiedKey>, TlsError> {
    let fail = |path: &Path, reason: String| TlsError {
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&read_certificates(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(cert, e.to_string()))?;
    let key_der = PrivateKeyDer::from_pem_slice(&read_private_key(key)?)
        .map_err(|e| fail(key, e.to_string()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| fail(key, e.to_string()))?;
    Ok(std::sync::Arc::new(rustls::sign::CertifiedKey::new(
        certs, signing,
    )))
}

/// Server TLS files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
    /// CA of client certificates (mutual TLS when set).
    pub client_ca: Option<PathBuf>,
}

impl ServerTlsFiles {
    /// Checks what the TLS stack will check when the server starts, naming the file and the
    /// reason: the certificate chain and key parse, the key is of a supported type and matches
    /// the certificate, and every client CA certificate is usable as a trust anchor.
    pub fn check(&self) -> Result<(), TlsError> {
        let key = certified_key(&self.cert, &self.key)?;
        key.keys_match().map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsError {
                path: self.key.clone(),
                reason: format!(
                    "the private key does not match the certificate of {}",
                    self.cert.display()
                ),
            },
            other => TlsError {
                path: self.cert.clone(),
                reason: format!("unusable certificate: {other}"),
            },
        })?;
        if let Some(ca) = &self.client_ca {
            let fail = |reason: String| TlsError {
                path: ca.clone(),
                reason,
            };
            let pem = read_certificates(ca)?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| fail(e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| fail(format!("unusable CA certificate: {e}")))?;
            }
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                std::sync::Arc::new(roots),
                std::sync::Arc::new(rustls::crypto::ring::default_provider()),
            )
            .build()
            .map_err(|e| fail(format!("unusable client CA: {e}")))?;
        }
        Ok(())
    }

    /// The tonic server configuration (after [`ServerTlsFiles::check`]).
    pub fn load(&self) -> Result<ServerTlsConfig, TlsError> {
        self.check()?;
        let identity =
            Identity::from_pem(read_certificates(&self.cert)?, read_private_key(&self.key)?);
        let mut cfg = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca {
            cfg = cfg.client_ca_root(Certificate::from_pem(read_certificates(ca)?));
        }
        Ok(cfg)
    }
}

/// Client TLS files.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClientTlsFiles {
    /// CA of the server's certificate (default: the system roots).
    pub ca: Option<PathBuf>,
    /// Client certificate and key (mutual TLS).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// Name to verify the server's certificate against (default: the address's host).
    pub domain: Option<String>,
}

/// Client TLS material read from [`ClientTlsFiles`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClientPem {
    /// CA PEM.
    pub ca: Option<Vec<u8>>,
    /// Certificate and key PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Server name.
    pub domain: Option<String>,
}

impl ClientTlsFiles {
    /// Reads and checks the files.
    pub fn load(&self) -> Result<ClientPem, TlsError> {
        Ok(ClientPem {
            ca: self.ca.as_deref().map(read_certificates).transpose()?,
            identity: match &self.identity {
                Some((c, k)) => Some((read_certificates(c)?, read_private_key(k)?)),
                None => None,
            },
            domain: self.domain.clone(),
        })
    }
}

/// Checks at start-up that `key`'s file exists and is readable.
pub fn readable(key: &str, path: &Path) -> Result<PathBuf, ConfigError> {
    match std::fs::File::open(path) {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => Ok(path.to_owned()),
        Ok(_) => Err(ConfigError::new(
            key,
            format!("{} is not a file", path.display()),
        )),
        Err(e) => Err(ConfigError::new(
            key,
            format!("{} is not a readable file: {e}", path.display()),
        )),
    }
}

/// Pairs a certificate and a key that must be given together (`cert_key`/`key_key` name them).
pub fn pair<T>(
    (cert_key, cert): (&str, Option<T>),
    (key_key, key): (&str, Option<T>),
) -> Result<Option<(T, T)>, ConfigError> {
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((c, k))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(ConfigError::new(
            key_key,
            format!("required when {cert_key} is set"),
        )),
        (None, Some(_)) => Err(ConfigError::new(
            cert_key,
            format!("required when {key_key} is set"),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn errors_name_the_file_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("cert.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let e = read_certificates(&not_pem).unwrap_err();
        assert!(
            e.to_string().contains("cert.pem") && e.to_string().contains("no PEM"),
            "{e}"
        );
        let e = read_private_key(&dir.path().join("missing.key")).unwrap_err();
        assert!(e.to_string().contains("missing.key"), "{e}");

        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (c, k) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        ServerTlsFiles {
            cert: c.clone(),
            key: k.clone(),
            client_ca: Some(c.clone()),
        }
        .load()
        .unwrap();
        let e = ServerTlsFiles {
            cert: k.clone(),
            key: k.clone(),
            client_ca: None,
        }
        .load()
        .unwrap_err();
        assert_eq!(e.path, k);
        // A key of another certificate: the key file, and why.
        let other = rcgen::KeyPair::generate().unwrap();
        let other_key = dir.path().join("other.key");
        std::fs::write(&other_key, other.serialize_pem()).unwrap();
        let e = ServerTlsFiles {
            cert: c.clone(),
            key: other_key.clone(),
            client_ca: None,
        }
        .load()
        .unwrap_err();
        assert_eq!(e.path, other_key);
        assert!(e.reason.contains("does not match"), "{e}");
        // PEM armour around bytes that are no certificate.
        let junk = dir.path().join("junk.pem");
        std::fs::write(
            &junk,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = ServerTlsFiles {
            cert: c.clone(),
            key: k.clone(),
            client_ca: Some(junk.clone()),
        }
        .load()
        .unwrap_err();
        assert_eq!(e.path, junk, "{e}");
        let e = ServerTlsFiles {
            cert: junk.clone(),
            key: k.clone(),
            client_ca: None,
        }
        .load()
        .unwrap_err();
        assert_eq!(e.path, junk, "{e}");
        let pem = ClientTlsFiles {
            ca: Some(c.clone()),
            identity: Some((c, k)),
            domain: None,
        }
        .load()
        .unwrap();
        assert!(pem.ca.is_some() && pem.identity.is_some());
        let (c, k) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        certified_key(&c, &k).unwrap();
        assert_eq!(certified_key(&k, &k).unwrap_err().path, k);
    }

    #[test]
    fn pairs() {
        assert_eq!(pair::<u8>(("a", None), ("b", None)).unwrap(), None);
        assert_eq!(pair(("a", Some(1)), ("b", None)).unwrap_err().key, "b");
        assert_eq!(pair(("a", None), ("b", Some(1))).unwrap_err().key, "a");
    }
}
