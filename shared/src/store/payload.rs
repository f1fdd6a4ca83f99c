//! How an event's payload is stored: zstd-compressed, as a binary attribute of the event item.
//!
//! DynamoDB bills a write by the item's size (1 write unit per started 1 KB, DynamoDB
//! developer guide, "Read/write capacity mode") and keeps the stored bytes, so a payload
//! written compressed costs its compressed size. JSON webhook payloads shrink several times
//! (the GitHub samples `make bench` reads: 9,002 bytes to about 2 KB at the median; the bench
//! report has the figures). The payload is still frozen byte for byte: zstd is lossless and
//! [`decompress`] gives back exactly the string [`compress`] was given.
//!
//! Item shape: `payload_z` (B), the zstd frame of the payload's UTF-8 bytes.

use super::StoreError;

/// The event item's attribute holding the zstd-compressed payload (binary).
pub const PAYLOAD_Z: &str = "payload_z";

/// zstd level 9: on the GitHub samples of `make bench` it stores the median payload (9,002
/// bytes) in 2 KB where level 3 (zstd's default) needs a few percent more, and compresses a
/// 256 KiB payload in a few milliseconds (zstd's own benchmarks: tens of MB/s at level 9).
pub const LEVEL: i32 = 9;

/// The largest payload [`decompress`] gives back, bytes: ingest's limit
/// ([`crate::config::MAX_PAYLOAD_BYTES`], 256 KiB), so a corrupt or foreign frame cannot
/// make a reader allocate more.
pub const MAX_BYTES: usize = crate::config::MAX_PAYLOAD_BYTES;

/// The zstd frame of `payload`, as stored in [`PAYLOAD_Z`].
///
/// # Errors
/// [`StoreError::Corrupt`] when zstd fails (it does not on valid input; kept as an error, not
/// a panic).
pub fn compress(payload: &str) -> Result<Vec<u8>, StoreError> {
    zstd::bulk::compress(payload.as_bytes(), LEVEL).map_err(|e| StoreError::Corrupt(format!("zstd compress: {e}")))
}

/// The payload a [`PAYLOAD_Z`] frame holds, byte for byte.
///
/// # Errors
/// [`StoreError::Corrupt`] for a frame that is not zstd, decompresses past [`MAX_BYTES`], or
/// is not UTF-8.
pub fn decompress(frame: &[u8]) -> Result<String, StoreError> {
    let bytes =
        zstd::bulk::decompress(frame, MAX_BYTES).map_err(|e| StoreError::Corrupt(format!("zstd decompress: {e}")))?;
    String::from_utf8(bytes).map_err(|e| StoreError::Corrupt(format!("payload is not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_comes_back_byte_for_byte_and_smaller() {
        let payload = format!(
            "{{\"action\":\"created\",\"items\":[{}],\"note\":\"caf\u{e9} \\u00e9 \\\"q\\\"\"}}",
            (0..200)
                .map(|i| format!("{{\"id\":{i},\"name\":\"item {i}\",\"url\":\"https://example.com/items/{i}\"}}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let frame = compress(&payload).unwrap();
        assert!(frame.len() * 4 < payload.len(), "{} -> {}", payload.len(), frame.len());
        assert_eq!(decompress(&frame).unwrap(), payload);
        assert_eq!(decompress(&compress("").unwrap()).unwrap(), "");
    }

    #[test]
    fn a_frame_that_is_not_zstd_or_too_large_is_refused_not_a_panic() {
        assert!(matches!(decompress(b"not zstd"), Err(StoreError::Corrupt(_))));
        let big = "x".repeat(MAX_BYTES + 1);
        let frame = zstd::bulk::compress(big.as_bytes(), 1).unwrap();
        assert!(matches!(decompress(&frame), Err(StoreError::Corrupt(_))));
        let not_utf8 = zstd::bulk::compress(&[0xff, 0xfe], 1).unwrap();
        assert!(matches!(decompress(&not_utf8), Err(StoreError::Corrupt(_))));
    }
}
