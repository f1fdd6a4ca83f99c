//! The CA certificates this process trusts, for the AWS clients ([`crate::app`]) and for the
//! HTTPS POSTs to endpoints ([`crate::sender`]).
//!
//! Both trust the system's CA bundle file alone, when there is one and every certificate in it
//! parses as a trust anchor; otherwise, or when `SSL_CERT_DIR` is set, each library's default
//! (the platform's certificates: the bundle file and every file of the certificate directory,
//! read by rustls-native-certs).
//!
//! Why: the default reads the certificate directory too, which on Debian holds the same
//! certificates again, one file each (about 290 files), and both the SDK's HTTPS client and
//! reqwest's verifier load them when they are built: most of a function's cold start
//! (`make bench`, section 6, has the starts with `SSL_CERT_DIR` set beside them).
//!
//! The file is `SSL_CERT_FILE` when set, else the first of the usual places that exists
//! (`openssl-probe`'s list: `/etc/ssl/certs/ca-certificates.crt` on Debian,
//! `/etc/pki/tls/certs/ca-bundle.crt` on Amazon Linux, which Lambda's `provided.al2023` is).
//! It is read and checked once per process; the check matters because the SDK panics on a
//! certificate it cannot parse.

use std::sync::OnceLock;

/// The system's CA bundle file as PEM, when it is to be trusted alone (see the module docs);
/// `None` means "use the library's default". Read once per process.
pub fn ca_bundle() -> Option<&'static [u8]> {
    static BUNDLE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    BUNDLE
        .get_or_init(|| {
            let dir_asked = std::env::var_os("SSL_CERT_DIR").is_some_and(|d| !d.is_empty());
            let file = openssl_probe::probe().cert_file.filter(|_| !dir_asked)?;
            std::fs::read(file).ok().filter(|pem| bundle_parses(pem))
        })
        .as_deref()
}

/// The AWS clients' trust store: [`ca_bundle`] alone, else the SDK's default.
pub fn aws_trust_store() -> aws_smithy_http_client::tls::TrustStore {
    use aws_smithy_http_client::tls::TrustStore;
    match ca_bundle() {
        Some(pem) => TrustStore::empty().with_pem_certificate(pem.to_vec()),
        None => TrustStore::default(),
    }
}

/// Sets the sender's roots: [`ca_bundle`] alone, else reqwest's default (the platform
/// verifier over the platform's certificates).
pub fn sender_roots(builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    match ca_bundle().map(reqwest::Certificate::from_pem_bundle) {
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

    #[test]
    fn a_ca_bundle_file_is_trusted_alone_only_when_every_certificate_in_it_parses() {
        let file =
            openssl_probe::probe().cert_file.expect("this machine has a CA bundle file (Debian: ca-certificates)");
        let bundle = std::fs::read(&file).expect("readable CA bundle");
        assert!(bundle_parses(&bundle), "{} should parse as trust anchors", file.display());
        // One certificate the SDK could not parse: the whole file is set aside (the SDK would panic).
        let mut spoiled = bundle.clone();
        spoiled.extend_from_slice(NOT_A_CERTIFICATE.as_bytes());
        assert!(!bundle_parses(&spoiled));
        assert!(!bundle_parses(b""), "no certificate at all");
        assert!(!bundle_parses(b"-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n"), "bad base64");
        // reqwest takes the same bundle (the sender trusts it alone).
        let certs = reqwest::Certificate::from_pem_bundle(&bundle).expect("reqwest parses the bundle");
        assert!(!certs.is_empty());
    }
}
