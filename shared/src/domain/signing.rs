//! Standard Webhooks signing (<https://www.standardwebhooks.com/>).
//!
//! The signature is `v1,` + base64(HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}"))
//! where the key is the base64-decoded part of the secret after `whsec_`. It is computed fresh
//! for every attempt and never stored.

use crate::clock::Random;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `webhook-id` header: the event id, the same on every attempt.
pub const HEADER_ID: &str = "webhook-id";
/// The `webhook-timestamp` header: unix seconds of this attempt.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// The `webhook-signature` header: space-separated `v1,<base64>` signatures.
pub const HEADER_SIGNATURE: &str = "webhook-signature";
/// The `webhook-attempt` header: 1-based attempt number.
pub const HEADER_ATTEMPT: &str = "webhook-attempt";
/// Prefix of every secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A secret that is not `whsec_` + base64 of 24 to 64 bytes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("secret must be \"whsec_\" followed by base64 of 24 to 64 bytes")]
pub struct InvalidSecret;

/// The HMAC key of a `whsec_` secret.
///
/// # Errors
/// [`InvalidSecret`] when the prefix is missing, the rest is not base64, or the key is
/// shorter than 24 or longer than 64 bytes.
pub fn secret_key(secret: &str) -> Result<Vec<u8>, InvalidSecret> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).ok_or(InvalidSecret)?;
    let key = B64.decode(encoded).map_err(|_| InvalidSecret)?;
    if (24..=64).contains(&key.len()) { Ok(key) } else { Err(InvalidSecret) }
}

/// The digest a delivery keeps of its event's stored payload: base64 of SHA-256 of the bytes
/// (44 characters). See [`crate::domain::model::Delivery::payload_sha256`].
pub fn payload_digest(payload: &[u8]) -> String {
    use sha2::Digest as _;
    B64.encode(Sha256::digest(payload))
}

/// A new secret: `whsec_` + base64 of 32 random bytes.
pub fn generate_secret(rng: &Random) -> String {
    let mut key = [0u8; 32];
    rng.fill(&mut key);
    format!("{SECRET_PREFIX}{}", B64.encode(key))
}

/// The `v1,<base64>` signature of one attempt.
pub fn sign(key: &[u8], webhook_id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else { unreachable!("HMAC takes keys of any length") };
    mac.update(webhook_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The test vector published in the Standard Webhooks specification.
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TS: i64 = 1614265330;
    const SPEC_BODY: &str = r#"{"test": 2432232314}"#;
    const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn reproduces_the_spec_test_vector() {
        let key = secret_key(SPEC_SECRET).unwrap();
        assert_eq!(sign(&key, SPEC_ID, SPEC_TS, SPEC_BODY.as_bytes()), SPEC_SIGNATURE);
    }

    #[test]
    fn an_independent_verifier_accepts_our_signature() {
        let rng = Random::seeded(3);
        let secret = generate_secret(&rng);
        let key = secret_key(&secret).unwrap();
        let ts = chrono::Utc::now().timestamp();
        let body = br#"{"order":"o_1","amount":1200}"#;
        let mut headers = http::HeaderMap::new();
        headers.insert(HEADER_ID, "evt_1".parse().unwrap());
        headers.insert(HEADER_TIMESTAMP, ts.to_string().parse().unwrap());
        headers.insert(HEADER_SIGNATURE, sign(&key, "evt_1", ts, body).parse().unwrap());
        let verifier = standardwebhooks::Webhook::new(&secret).unwrap();
        verifier.verify(body, &headers).unwrap();
        headers.insert(HEADER_SIGNATURE, sign(&key, "evt_1", ts, b"tampered").parse().unwrap());
        assert!(verifier.verify(body, &headers).is_err());
    }

    #[test]
    fn rejects_malformed_secrets() {
        assert_eq!(secret_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), Err(InvalidSecret));
        assert_eq!(secret_key("whsec_***"), Err(InvalidSecret));
        assert_eq!(secret_key("whsec_c2hvcnQ="), Err(InvalidSecret));
    }
}
