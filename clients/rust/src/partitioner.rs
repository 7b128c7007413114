//! Choosing a partition the way Kafka's Java client does, so a key lands where a Kafka
//! client (or lograft's Python client) would put it.

/// MurmurHash2 exactly as Kafka's `org.apache.kafka.common.utils.Utils.murmur2` computes
/// it: seed `0x9747b28c`, little-endian 4-byte words, a signed 32-bit result.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: the sign bit masked off (not `abs`).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition of a keyed record: `toPositive(murmur2(key)) % partitions`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    to_positive(murmur2(key)) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Apache Kafka's `UtilsTest.testMurmur2` vectors.
    const KAFKA_VECTORS: &[(&[u8], i32)] = &[
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58897971,
        ),
        (b"abc", 479470107),
    ];

    #[test]
    fn murmur2_matches_kafka() {
        for (input, expected) in KAFKA_VECTORS {
            assert_eq!(
                murmur2(input),
                *expected,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn empty_key_hashes_like_kafka() {
        // Utils.murmur2(new byte[0]) in Java.
        assert_eq!(murmur2(b""), 275646681);
    }

    #[test]
    fn partition_masks_the_sign_bit_rather_than_negating() {
        // murmur2("foobar") is negative; Kafka masks it: 0x7fffffff & -790332482.
        assert_eq!(to_positive(-790332482), 1357151166);
        assert_eq!(partition_for_key(b"foobar", 10), 1357151166 % 10);
        assert_eq!(to_positive(i32::MIN), 0);
        for (input, _) in KAFKA_VECTORS {
            let p = partition_for_key(input, 7);
            assert!((0..7).contains(&p));
        }
    }
}
