//! A fast hash for the report's maps, keyed by what topwaits itself read: addresses,
//! ids, stack references and fingerprints. The standard SipHash resists chosen
//! keys at about four times the cost; a report hashes each of a million frames'
//! addresses several times, and took a tenth of its time hashing.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Word at a time: multiply, rotate, then a finishing mix so that keys differing
/// only in high bits (aligned addresses) still spread over the table's buckets.
#[derive(Clone, Copy, Default)]
pub struct FastHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(K).rotate_left(29);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
        // The length, so that "ab" + "c" and "a" + "bc" differ.
        self.add(bytes.len() as u64);
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(n as u64);
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 32;
        h = h.wrapping_mul(K);
        h ^ (h >> 29)
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(v: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(v)
    }

    #[test]
    fn equal_keys_hash_alike_and_near_keys_apart() {
        assert_eq!(hash(&(7u32, 0x7f00_1000u64)), hash(&(7u32, 0x7f00_1000u64)));
        assert_ne!(hash(&(7u32, 0x7f00_1000u64)), hash(&(8u32, 0x7f00_1000u64)));
        assert_ne!(hash(&"ab"), hash(&"ba"));
        assert_ne!(hash(&("ab", "c")), hash(&("a", "bc")));
        assert_ne!(hash(&0u64), hash(&1u64));
    }

    /// Aligned addresses (multiples of 64, as heap and stack-map pointers are)
    /// still fill the low bits a table picks buckets by, and the top 7 bits its
    /// control bytes hold.
    #[test]
    fn aligned_addresses_spread_over_low_and_high_bits() {
        let n = 4096u64;
        let low: FastSet<u64> =
            (0..n).map(|i| hash(&(0xffff_8880_0000_0000 + i * 64)) & 4095).collect();
        assert!(low.len() > 2400, "only {} of 4096 buckets used", low.len());
        let top: FastSet<u64> =
            (0..n).map(|i| hash(&(0x5555_0000_0000 + i * 4096)) >> 57).collect();
        assert_eq!(top.len(), 128, "every 7-bit tag used");
    }

    #[test]
    fn maps_work_as_maps() {
        let mut m: FastMap<(u32, u64), &str> = FastMap::default();
        for i in 0..10_000u64 {
            m.insert((i as u32 % 7, i << 12), "x");
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get(&(3, 3 << 12)), Some(&"x"));
        assert_eq!(m.get(&(4, 3 << 12)), None);
    }
}
