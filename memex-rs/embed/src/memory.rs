//! Giving freed memory back. The service is idle most of the time, but a burst of appends, a
//! backfill or a large session's compaction leaves tens of megabytes of freed buffers that the
//! allocator would otherwise keep for the life of the process.

/// Hands freed heap memory back to the system (glibc's `malloc_trim`; a no-op elsewhere).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Serves large allocations from the heap instead of fresh `mmap`s. The embedding model
/// allocates and frees tensors of megabytes on every pass; as separate mappings each one costs
/// page faults and zeroing (a third of the CPU time, measured), while heap blocks are reused.
/// [`release_free_memory`] still hands the heap's free memory back.
pub fn keep_large_allocations_in_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is safe to call at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}
