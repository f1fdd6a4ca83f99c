//! The CA certificates this process trusts, for the AWS clients ([`crate::app`]) and for the
//! HTTPS POSTs to endpoints ([`crate::sender`]).
//!
//! Both trust the system's CA bundle file alone, when there is one and every certificate in it
//! parses as a trust anchor; otherwise, or when `SSL_CERT_DIR` is set, each library's default
//! (rustls-native-certs: with `SSL_CERT_DIR` set, `SSL_CERT_FILE` if set and every file of the
//! named directories; with neither set, the probed bundle file and certificate directory).
//!
//! Why: the default reads the certificate directory too, which on Debian holds the same
//! certificates again, one file each (about 290 files), and both the SDK's HTTPS client and
//! reqwest's verifier load them when they are built (`make bench`, section 6, has the starts
//! with `SSL_CERT_DIR` set beside them). A certificate that is only a file in that directory,
//! not in the bundle, is no longer trusted: add CAs with the system's tool
//! (`update-ca-certificates`, `update-ca-trust`), which writes the bundle, or set
//! `SSL_CERT_FILE` or `SSL_CERT_DIR`.
//!
//! The file is `SSL_CERT_FILE` when set (and it exists), else the first that exists of
//! `openssl-probe`'s list: `/etc/ssl/certs/ca-certificates.crt` on Debian,
//! `/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem` on RHEL-family systems such as Amazon
//! Linux 2023, Lambda's `provided.al2023` (`/etc/pki/tls/certs/ca-bundle.crt` links to it).
//! It is read and checked once per process; the check matters because the SDK panics on a
//! certificate it cannot parse.

use std::sync::OnceLock;

/// The system's CA bundle file as PEM, when it is to be trusted alone (see the module docs);
/// `None` means "use the library's default". Read once per process.
pub fn ca_bundle() -> Option<&'static [u8]> {
    static BUNDLE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    BUNDLE
        .get_or_init(|| {
            if std::env::var_os("SSL_CERT_DIR").is_some_and(|d| !d.is_empty()) {
                tracing::debug!("SSL_CERT_DIR is set: the platform's default CA certificates are trusted");
                return None;
            }
            let file = openssl_probe::probe().cert_file?;
            let bundle = std::fs::read(&file).ok().filter(|pem| bundle_parses(pem));
            if bundle.is_none() {
                tracing::info!(file = %file.display(), "CA bundle file unreadable or not every certificate in it parses: the platform's default CA certificates are trusted");
            }
            bundle
        })
        .as_deref()
}

/// The AWS clients' trust store: [`ca_bundle`] alone, else the SDK's default.
pub fn aws_trust_store() -> aws_smithy_http_client::tls::TrustStore {
    trust_store_for(ca_bundle())
}

/// Sets the sender's roots: [`ca_bundle`] alone, else reqwest's default (the platform
/// verifier over the platform's certificates).
pub fn sender_roots(builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    roots_for(builder, ca_bundle())
}

fn trust_store_for(bundle: Option<&[u8]>) -> aws_smithy_http_client::tls::TrustStore {
    use aws_smithy_http_client::tls::TrustStore;
    match bundle {
        Some(pem) => TrustStore::empty().with_pem_certificate(pem.to_vec()),
        None => TrustStore::default(),
    }
}

fn roots_for(builder: reqwest::ClientBuilder, bundle: Option<&[u8]>) -> reqwest::ClientBuilder {
    match bundle.map(reqwest::Certificate::from_pem_bundle) {
        Some(Ok(certs)) => builder.tls_certs_only(certs),
        _ => builder,
    }
}

/// True when `pem` holds at least one certificate and each is a trust anchor rustls accepts.
fn bundle_parses(pem: &[u8]) -> bool {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let Ok(certs) = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>() else {
        return false;
    };
    let mut roots = rustls::RootCertStore::empty();
    !certs.is_empty() && certs.into_iter().all(|c| roots.add(c).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PEM block that decodes (base64 of three zero bytes) but is no certificate.
    const NOT_A_CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

    /// This machine's CA bundle file (openssl-probe's), read.
    fn system_bundle() -> (std::path::PathBuf, Vec<u8>) {
        let file =
            openssl_probe::probe().cert_file.expect("this machine has a CA bundle file (Debian: ca-certificates)");
        let bundle = std::fs::read(&file).expect("readable CA bundle");
        (file, bundle)
    }

    #[test]
    fn a_ca_bundle_file_is_trusted_alone_only_when_every_certificate_in_it_parses() {
        let (file, bundle) = system_bundle();
        assert!(bundle_parses(&bundle), "{} should parse as trust anchors", file.display());
        // One certificate the SDK could not parse: the whole file is set aside (the SDK would panic).
        let mut spoiled = bundle.clone();
        spoiled.extend_from_slice(NOT_A_CERTIFICATE.as_bytes());
        assert!(!bundle_parses(&spoiled));
        assert!(!bundle_parses(b""), "no certificate at all");
        assert!(!bundle_parses(b"-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n"), "bad base64");
    }

    #[tokio::test]
    async fn both_clients_build_on_the_bundle_file_alone() {
        // This shell may set SSL_CERT_DIR (then the process keeps the default), so the bundle
        // is given here: the clients are built as they are when it is trusted alone.
        let (_, bundle) = system_bundle();
        assert!(bundle_parses(&bundle));
        // The SDK turns the store into rustls roots when a client is built (it would panic on
        // a certificate it cannot parse).
        use aws_smithy_http_client::tls::TlsContext;
        let tls = TlsContext::builder().with_trust_store(trust_store_for(Some(&bundle))).build().expect("tls context");
        let http = crate::app::https_client(tls);
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .http_client(http)
            .load()
            .await;
        let _ = aws_sdk_dynamodb::Client::new(&sdk);
        // reqwest takes the same bundle as its only roots.
        crate::sender::install_tls_provider();
        assert!(roots_for(reqwest::Client::builder(), Some(&bundle)).build().is_ok());
    }
}
