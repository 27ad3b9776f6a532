//! HTTPS: the server's certificate chain and key, loaded from PEM files into a rustls
//! configuration (the `ring` crypto provider, TLS 1.2 and 1.3, HTTP/1.1 by ALPN).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The TLS configuration of a server presenting the certificate chain in `cert` (PEM, the
/// server's certificate first, then its intermediates) with the private key in `key` (PEM:
/// PKCS#8, PKCS#1 or SEC1). The error says which file is wrong and how.
pub fn tls_server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read the certificate chain {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "{} holds no certificate (PEM, -----BEGIN CERTIFICATE-----)",
            cert.display()
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read the private key {}: {e}", key.display()))?;
    // ring rather than aws-lc-rs: it builds without CMake (and with cargo-zigbuild for old
    // glibc). rustls deprecates it for lacking post-quantum key exchange (X25519MLKEM768);
    // clients negotiate X25519 or a NIST curve instead.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| {
            format!(
                "{} and {} do not make a certificate and its key: {e}",
                cert.display(),
                key.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
