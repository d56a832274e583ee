//! Read-only memory maps of cache entries and the typed views into them; the only `unsafe` of the
//! dataset module.
//!
//! Invariant relied on: a cache entry is never modified after it is renamed into place. Writers build a
//! temp file and rename it over the entry, which replaces the directory entry and leaves the inode a
//! reader has mapped untouched; nothing in agentx truncates or rewrites an entry in place.

use std::fs::File;
use std::io;

#[cfg(not(target_endian = "little"))]
compile_error!("the dataset cache stores little-endian integers and is read in place; big-endian hosts are not supported");

/// A read-only map of a whole file.
#[derive(Debug)]
pub(crate) struct Mapped {
    map: memmap2::Mmap,
}

impl Mapped {
    /// Maps `file` read-only.
    #[allow(unsafe_code)] // A memory map is unsafe by nature; the invariant above makes it sound.
    pub(crate) fn map(file: &File) -> io::Result<Self> {
        // SAFETY: the mapping is read-only and cache entries are immutable once renamed into place (see
        // the module invariant), so the bytes cannot change under the shared slices handed out. A
        // third party truncating the file could still fault the process; that is outside what a
        // content-addressed cache can defend against, the same contract as ripgrep's mmap searcher.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Mapped { map })
    }

    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// Views `bytes` as `u32`s when it is 4-byte aligned and a whole number of `u32`s long.
#[allow(unsafe_code)] // Reading a mapped entry's integers in place, without a copy.
pub(crate) fn as_u32s(bytes: &[u8]) -> Option<&[u32]> {
    // SAFETY: every bit pattern is a valid u32, and the result is accepted only when `align_to` puts all
    // bytes in the aligned middle, so no byte is skipped or reinterpreted across the slice bounds.
    let (head, mid, tail) = unsafe { bytes.align_to::<u32>() };
    (head.is_empty() && tail.is_empty()).then_some(mid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u32_view_requires_alignment_and_whole_words() {
        // Back the bytes with u32 storage so the slice is 4-aligned.
        let words = [1u32, 2, 3];
        let bytes = word_bytes(&words);
        assert_eq!(as_u32s(bytes), Some(&words[..]));
        assert_eq!(as_u32s(&bytes[..5]), None);
        assert_eq!(as_u32s(&bytes[1..5]), None);
    }

    #[allow(unsafe_code)] // Test storage: u32-aligned bytes.
    fn word_bytes(w: &[u32]) -> &[u8] {
        // SAFETY: u8 has alignment 1 and the byte length covers exactly the u32 slice.
        unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), std::mem::size_of_val(w)) }
    }
}
