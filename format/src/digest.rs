//! The SHA-256 of many files at once.
//!
//! A pack's index lists every file's SHA-256, and a reader must check each one
//! (docs/FORMAT.md), so sealing and opening hash every byte of every file. On the bench
//! tree that was a fifth of `packer extract`'s CPU. A single SHA-256 cannot go faster than
//! one round after another, because each of a block's 64 rounds needs the one before it. Many
//! messages can go side by side, though, one per SIMD lane: `tape_sha256::hash_many` picks
//! 16 lanes of AVX-512, four interleaved SHA-NI streams, or portable code, by what the CPU
//! has at run time, and its output is plain SHA-256.
//!
//! The lanes run in lockstep, so a group is as slow as its longest message. The messages
//! are therefore sorted by length before they go in. A message of [`ALONE_FROM`] bytes or
//! more is hashed on its own (SHA-NI where the CPU has it): side by side it would mostly
//! keep lanes waiting.
//!
//! On the bench tree (4,779 files, 100 MB, an Intel Xeon with SHA-NI and AVX-512), hashing
//! went from 20% of `packer extract`'s CPU to 14%, and the extract from 0.27 to 0.22 s of
//! CPU. Timed on their own, the same files side by side but unsorted hashed slower than one
//! at a time. On the `few-large` shape, whose bytes are mostly in files of megabytes, nothing
//! changed (BENCHMARKS.md, "Many files hashed side by side").

use sha2::Digest;

/// From this length on, a message is hashed alone.
const ALONE_FROM: usize = 1024 * 1024;

/// The SHA-256 of each of `messages`, in their order.
pub(crate) fn sha256_each(messages: &[&[u8]]) -> Vec<[u8; 32]> {
    let mut digests = vec![[0; 32]; messages.len()];
    let mut side_by_side = Vec::with_capacity(messages.len());
    for (at, message) in messages.iter().enumerate() {
        if message.len() >= ALONE_FROM || messages.len() == 1 {
            digests[at] = sha2::Sha256::digest(message).into();
        } else {
            side_by_side.push(at);
        }
    }
    if side_by_side.is_empty() {
        return digests;
    }
    side_by_side.sort_unstable_by_key(|&at| messages[at].len());
    let sorted: Vec<&[u8]> = side_by_side.iter().map(|&at| messages[at]).collect();
    let mut found = vec![[0; 32]; sorted.len()];
    tape_sha256::hash_many(&sorted, &mut found);
    for (at, digest) in side_by_side.into_iter().zip(found) {
        digests[at] = digest;
    }
    digests
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_by_one(messages: &[&[u8]]) -> Vec<[u8; 32]> {
        messages
            .iter()
            .map(|m| sha2::Sha256::digest(m).into())
            .collect()
    }

    /// Bytes that differ from message to message and from place to place.
    fn bytes(seed: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) as u8)
            .collect()
    }

    #[test]
    fn every_length_across_the_block_and_padding_edges_hashes_as_sha256() {
        let owned: Vec<Vec<u8>> = (0..=600).map(|len| bytes(len, len)).collect();
        let messages: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        assert_eq!(sha256_each(&messages), one_by_one(&messages));
    }

    #[test]
    fn digests_come_back_in_the_order_given_whatever_the_lengths() {
        // Long and short mixed, repeats, empties, one past the alone threshold.
        let lens = [
            17_000,
            0,
            ALONE_FROM,
            3,
            64,
            17_000,
            ALONE_FROM - 1,
            55,
            56,
            1,
            4_096,
            0,
            200_000,
            9,
            119,
            120,
            ALONE_FROM + 7,
            33,
            2,
            640,
        ];
        let owned: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(seed, &len)| bytes(seed, len))
            .collect();
        let messages: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        assert_eq!(sha256_each(&messages), one_by_one(&messages));
        for n in 0..messages.len() {
            assert_eq!(
                sha256_each(&messages[..n]),
                one_by_one(&messages[..n]),
                "{n}"
            );
        }
    }

    #[test]
    fn a_known_digest() {
        assert_eq!(
            hex::encode(sha256_each(&[b"abc", b""])[0]),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex::encode(sha256_each(&[b"abc", b""])[1]),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
