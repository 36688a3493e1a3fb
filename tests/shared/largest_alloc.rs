//! A global allocator that forwards every call to the system allocator unchanged and
//! remembers the largest single request since the last [`reset`], for tests that prove a
//! size claimed by untrusted input drives no allocation. The format's tests and the fuzz
//! targets include this file (`#[path]`) and install it with
//! `#[global_allocator] static A: LargestAlloc = LargestAlloc;`.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, remembering the largest single request.
pub struct LargestAlloc;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// Forgets the requests so far.
pub fn reset() {
    LARGEST.store(0, Ordering::Relaxed);
}

/// The largest single request since the last [`reset`], in bytes.
pub fn largest() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the only
// extra work is an atomic max on the requested size.
unsafe impl GlobalAlloc for LargestAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
