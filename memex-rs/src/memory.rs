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
