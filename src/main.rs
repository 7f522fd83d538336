/// mimalloc instead of glibc's malloc: the offline passes (`pins`, dumps, parity) build and
/// drop many small JSON trees and strings per line, and glibc's allocator was about a sixth of
/// `pins`' CPU on corpus cells (`perf`, `-j 1`); mimalloc cuts that share by about half.
#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// mimalloc through its plain entry points where they give the alignment asked for.
///
/// `mimalloc::MiMalloc` calls `mi_malloc_aligned` for every allocation, three calls deep and
/// about 70 instructions before the block is taken (9 % of `pins`' instructions on corpus
/// cells); `mi_malloc` is the fast path itself. mimalloc allocates a block aligned to its
/// size up to 16 bytes (`mi_malloc_is_naturally_aligned` in its `alloc-aligned.c`, the test
/// `mi_malloc_aligned` makes before taking that same path), so an alignment of at most 16
/// and at most the size goes to `mi_malloc`, anything else to the aligned entry points.
struct Allocator;

/// The alignment `mi_malloc` gives a block of at least that size (mimalloc's
/// `MI_MAX_ALIGN_SIZE`).
const NATURAL_ALIGN: usize = 16;

#[inline]
fn natural(align: usize, size: usize) -> bool {
    align <= NATURAL_ALIGN && align <= size
}

// SAFETY: every pointer comes from mimalloc and goes back to it; a block is aligned as its
// layout asks (see the type's docs), and `mi_free` frees aligned and plain blocks alike.
unsafe impl std::alloc::GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        unsafe {
            if natural(layout.align(), layout.size()) {
                libmimalloc_sys::mi_malloc(layout.size()).cast()
            } else {
                libmimalloc_sys::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        unsafe {
            if natural(layout.align(), layout.size()) {
                libmimalloc_sys::mi_zalloc(layout.size()).cast()
            } else {
                libmimalloc_sys::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        unsafe {
            // The block kept in place was allocated with this alignment; a new one is
            // naturally aligned for `new_size`.
            if natural(layout.align(), new_size) {
                libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast()
            } else {
                libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
            }
        }
    }
}

fn main() -> std::process::ExitCode {
    bridgewire::cli::run(std::env::args_os())
}
