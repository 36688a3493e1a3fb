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

/// How a pack's index digests a file. Which rule holds is fixed by the pack's container
/// format (1 and 2: [`DigestRule::Bytes`], 3: [`DigestRule::Pieces`]), which a reader knows
/// from the header before it decodes a frame, and is repeated by the index's own `format`
/// (1 and 2 respectively).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestRule {
    /// The SHA-256 of the file's bytes.
    Bytes,
    /// A file of more than [`PIECE_LEN`] bytes: the SHA-256 of the SHA-256s of its
    /// consecutive [`PIECE_LEN`]-byte pieces (the last one shorter or whole), in order and
    /// concatenated. A shorter file: the SHA-256 of its bytes. One large file then hashes
    /// as many independent messages side by side instead of one chain of blocks
    /// (BENCHMARKS.md: twice as fast on a CPU with AVX-512).
    Pieces,
}

/// The piece length of [`DigestRule::Pieces`]: 64 KiB.
pub const PIECE_LEN: usize = 64 * 1024;

impl DigestRule {
    /// The rule of a container format, or `None` for a format with no rule (unknown).
    pub fn of_format(format: u32) -> Option<Self> {
        match format {
            1 | 2 => Some(DigestRule::Bytes),
            3 => Some(DigestRule::Pieces),
            _ => None,
        }
    }

    /// The rule an index of this `format` uses (1: bytes, 2: pieces).
    pub(crate) fn of_index_format(format: u32) -> Option<Self> {
        match format {
            1 => Some(DigestRule::Bytes),
            2 => Some(DigestRule::Pieces),
            _ => None,
        }
    }

    /// The `format` the index of a pack under this rule declares.
    pub(crate) fn index_format(self) -> u32 {
        match self {
            DigestRule::Bytes => 1,
            DigestRule::Pieces => 2,
        }
    }

    /// The digest of each of `messages`, in their order.
    pub(crate) fn each(self, messages: &[&[u8]]) -> Vec<[u8; 32]> {
        match self {
            DigestRule::Bytes => sha256_each(messages),
            DigestRule::Pieces => pieces_each(messages),
        }
    }

    /// The digest of `bytes`, in lowercase hex as the index writes it.
    pub fn hex(self, bytes: &[u8]) -> String {
        hex::encode(self.each(&[bytes])[0])
    }
}

/// [`DigestRule::Pieces`] of each of `messages`: every short message and every piece of the
/// long ones go side by side in one batch, sorted by length (the pieces, all but the last
/// of each message of one length, run in lockstep without waiting lanes).
fn pieces_each(messages: &[&[u8]]) -> Vec<[u8; 32]> {
    let mut pieces: Vec<(usize, &[u8])> = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        if message.len() > PIECE_LEN {
            pieces.extend(message.chunks(PIECE_LEN).map(|piece| (at, piece)));
        } else {
            pieces.push((at, message));
        }
    }
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    order.sort_by_key(|&i| pieces[i].1.len());
    let sorted: Vec<&[u8]> = order.iter().map(|&i| pieces[i].1).collect();
    let mut found = vec![[0; 32]; sorted.len()];
    tape_sha256::hash_many(&sorted, &mut found);
    let mut of_piece = vec![[0; 32]; pieces.len()];
    for (i, digest) in order.into_iter().zip(found) {
        of_piece[i] = digest;
    }
    let mut digests = vec![[0; 32]; messages.len()];
    let mut lists: Vec<Option<sha2::Sha256>> = vec![None; messages.len()];
    for ((at, _), digest) in pieces.iter().zip(&of_piece) {
        if messages[*at].len() > PIECE_LEN {
            lists[*at]
                .get_or_insert_with(sha2::Sha256::new)
                .update(digest);
        } else {
            digests[*at] = *digest;
        }
    }
    for (at, list) in lists.into_iter().enumerate() {
        if let Some(list) = list {
            digests[at] = list.finalize().into();
        }
    }
    digests
}

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

    /// The pieces rule written out the slow way, as docs/FORMAT.md states it.
    fn pieces_by_definition(message: &[u8]) -> [u8; 32] {
        if message.len() <= PIECE_LEN {
            return sha2::Sha256::digest(message).into();
        }
        let mut list = Vec::new();
        for piece in message.chunks(PIECE_LEN) {
            list.extend_from_slice(&sha2::Sha256::digest(piece));
        }
        sha2::Sha256::digest(&list).into()
    }

    #[test]
    fn the_pieces_rule_is_the_sha256_of_the_pieces_sha256s_at_every_edge() {
        let lens = [
            0,
            1,
            PIECE_LEN - 1,
            PIECE_LEN,
            PIECE_LEN + 1,
            2 * PIECE_LEN,
            2 * PIECE_LEN + 55,
            3 * PIECE_LEN - 1,
            700_001,
            17,
            ALONE_FROM + 7,
        ];
        let owned: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(seed, &len)| bytes(seed, len))
            .collect();
        let messages: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let expected: Vec<[u8; 32]> = messages.iter().map(|m| pieces_by_definition(m)).collect();
        assert_eq!(DigestRule::Pieces.each(&messages), expected);
        for n in 0..messages.len() {
            assert_eq!(
                DigestRule::Pieces.each(&messages[..n]),
                expected[..n],
                "{n}"
            );
        }
        // Up to a piece's length the two rules agree; past it they differ.
        for (message, len) in messages.iter().zip(lens) {
            let same = DigestRule::Bytes.hex(message) == DigestRule::Pieces.hex(message);
            assert_eq!(same, len <= PIECE_LEN, "{len}");
        }
    }

    #[test]
    fn each_format_has_its_rule_and_its_index_format() {
        assert_eq!(DigestRule::of_format(1), Some(DigestRule::Bytes));
        assert_eq!(DigestRule::of_format(2), Some(DigestRule::Bytes));
        assert_eq!(DigestRule::of_format(3), Some(DigestRule::Pieces));
        assert_eq!(DigestRule::of_format(4), None);
        for rule in [DigestRule::Bytes, DigestRule::Pieces] {
            assert_eq!(DigestRule::of_index_format(rule.index_format()), Some(rule));
        }
        assert_eq!(DigestRule::of_index_format(3), None);
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
