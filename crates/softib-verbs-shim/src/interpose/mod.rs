//! The libc file calls a program uses to find an RDMA device, interposed so that paths
//! under `/sys/class/infiniband`, `/sys/class/infiniband_verbs` and `/dev/infiniband` lead
//! into the device view (`crate::view`). Each function resolves the next definition of its
//! symbol (libc's) once with `dlsym(RTLD_NEXT)` and calls it, with the path rewritten to
//! the view's file when it is a viewed path and unchanged otherwise; the test for a viewed
//! path reads at most a few bytes of the string (`paths.rs`).
//!
//! Only absolute paths are rewritten. The view is made of real files and directories, so a
//! descriptor or a working directory obtained through a rewritten path (`opendir` then
//! `openat(dirfd(d), "softib0/node_guid")`, or `chdir` into the tree) keeps working
//! without interposition.
//!
//! libc's own internal calls do not go through these symbols (glibc calls `__open` from
//! `fopen`, not `open`), which is why the higher-level entry points (`fopen`, `opendir`,
//! `realpath`, `scandir`, ...) are interposed themselves.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

pub mod paths;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sys::set_errno;

/// The next definition of a libc symbol, resolved once and cached.
struct Real {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Real {
    const fn new(name: &'static CStr) -> Real {
        Real {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The symbol's address, or None when no later object defines it (an old libc
    /// without `statx`, say).
    fn get(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Relaxed);
        if a != 0 {
            return Some(a);
        }
        // SAFETY: dlsym takes a NUL-terminated name and RTLD_NEXT, and is thread-safe; it
        // returns NULL or the address of the symbol in a later-loaded object.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        if p == 0 {
            return None;
        }
        self.addr.store(p, Ordering::Relaxed);
        Some(p)
    }
}

/// Declares, for each symbol, its cached resolver and the C type of its libc definition.
macro_rules! real_fn {
    ($cache:ident, $name:literal, $ty:ty) => {
        static $cache: Real = Real::new($name);
        impl Real {
            #[allow(non_snake_case, dead_code)]
            fn $cache(&self) -> Option<$ty> {
                // SAFETY: the address is libc's definition of this very symbol, whose C
                // prototype `$ty` restates (glibc's <fcntl.h>, <sys/stat.h>, ...).
                self.get()
                    .map(|a| unsafe { std::mem::transmute::<usize, $ty>(a) })
            }
        }
    };
}

/// The view's path for `path` when it is a viewed path: `Some(Some(rewritten))`;
/// `Some(None)` when it is viewed but there is no view (it then does not exist); None for
/// every other path, which goes to libc unchanged.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn rewrite(path: *const c_char) -> Option<Option<CString>> {
    if path.is_null() {
        return None;
    }
    // SAFETY: `is_viewed` reads byte i only after bytes 0..i were non-NUL and matched a
    // prefix, so every read is within the caller's NUL-terminated string.
    let viewed = paths::is_viewed(|i| unsafe { *path.add(i) } as u8);
    if !viewed {
        return None;
    }
    let root = crate::view::root();
    // SAFETY: non-NULL and NUL-terminated (function contract).
    let tail = unsafe { CStr::from_ptr(path) }.to_bytes();
    Some(root.map(|r| {
        let mut full = r.as_os_str().as_bytes().to_vec();
        full.extend_from_slice(tail);
        // Neither part holds a NUL: the root is a path we made, the tail came from a C
        // string.
        CString::new(full).expect("no interior NUL")
    }))
}

/// Calls `f` with the path libc should see, or fails with ENOENT (returning `fail`) for a
/// viewed path when there is no view.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn with_path<T>(path: *const c_char, fail: T, f: impl FnOnce(*const c_char) -> T) -> T {
    // SAFETY: forwarded contract.
    match unsafe { rewrite(path) } {
        None => f(path),
        Some(Some(p)) => f(p.as_ptr()),
        Some(None) => {
            set_errno(libc::ENOENT);
            fail
        }
    }
}

/// True when `flags` would modify a file (write access, create, truncate).
fn writes(flags: c_int) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_CREAT | libc::O_TRUNC) != 0
}

/// Like `with_path` for an open: a viewed sysfs file opened for writing fails with EACCES,
/// as the kernel refuses a read-only attribute (kernfs), which also keeps the tree that
/// other processes share intact when the program runs as root. The device node (a link to
/// `/dev/null`) opens for reading and writing as a real uverbs node does.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn with_open_path(
    path: *const c_char,
    write: bool,
    f: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    if write && !path.is_null() {
        // SAFETY: as in `rewrite`: reads stop at the first byte that leaves a prefix.
        let sysfs = paths::is_viewed(|i| unsafe { *path.add(i) } as u8)
            // SAFETY: the path is viewed, so it holds at least the prefix's bytes.
            && unsafe { *path.add(1) } as u8 == b's';
        if sysfs {
            set_errno(libc::EACCES);
            return -1;
        }
    }
    // SAFETY: forwarded contract.
    unsafe { with_path(path, -1, f) }
}

/// True when an fopen(3) mode writes (`w`, `a` or `+`).
///
/// # Safety
/// `mode` is NULL or a NUL-terminated string.
unsafe fn fopen_writes(mode: *const c_char) -> bool {
    // SAFETY: function contract.
    !mode.is_null()
        && unsafe { CStr::from_ptr(mode) }
            .to_bytes()
            .iter()
            .any(|b| matches!(b, b'w' | b'a' | b'+'))
}

fn no_libc<T>(fail: T) -> T {
    set_errno(libc::ENOSYS);
    fail
}

/// Defines interposed functions, each a libc function `fn name(.., @path, ..) -> ret`
/// whose `path` argument is rewritten: it resolves libc's definition through its cache
/// (`real_fn!`), fails with ENOSYS and `fail` when there is none, and otherwise calls it
/// with every argument as given but the path (`with_path`, which fails with `fail`).
/// `= CACHE, open(writes)` instead of `= CACHE, fail` goes through `with_open_path`, which
/// refuses to write a viewed sysfs file and fails with -1.
macro_rules! interpose {
    () => {};
    (
        fn $name:ident($($pre:ident: $pt:ty,)* @$path:ident $(, $post:ident: $qt:ty)*) -> $ret:ty
            = $cache:ident, open($writes:expr);
        $($rest:tt)*
    ) => {
        interpose!(@def $name($($pre: $pt,)* @$path $(, $post: $qt)*) -> $ret
            = $cache, -1, with_open_path($writes));
        interpose!($($rest)*);
    };
    (
        fn $name:ident($($pre:ident: $pt:ty,)* @$path:ident $(, $post:ident: $qt:ty)*) -> $ret:ty
            = $cache:ident, $fail:expr;
        $($rest:tt)*
    ) => {
        interpose!(@def $name($($pre: $pt,)* @$path $(, $post: $qt)*) -> $ret
            = $cache, $fail, with_path($fail));
        interpose!($($rest)*);
    };
    (
        @def $name:ident($($pre:ident: $pt:ty,)* @$path:ident $(, $post:ident: $qt:ty)*) -> $ret:ty
            = $cache:ident, $fail:expr, $with:ident($arg:expr)
    ) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $($pre: $pt,)* $path: *const c_char $(, $post: $qt)*
        ) -> $ret {
            let Some(f) = $cache.$cache() else {
                return no_libc($fail);
            };
            // SAFETY: the caller meets the libc function's contract (a C string for
            // `path`, the rest libc's to judge), which is passed on unchanged but for a
            // viewed path; `f` is libc's definition of the same function.
            unsafe { $with($path, $arg, |$path| f($($pre,)* $path $(, $post)*)) }
        }
    };
}

// --- open ------------------------------------------------------------------------------
//
// open(2)'s mode is a variadic argument, which Rust cannot receive; the functions below
// take it as a third fixed argument. On the x86-64 and AArch64 Linux ABIs the first
// variadic integer arguments travel in the same registers as fixed ones, so `mode` holds
// the caller's mode when it passed one and an unspecified value otherwise, which libc
// ignores unless O_CREAT or O_TMPFILE is set (exactly when the caller passes a mode).

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type Openat2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;

real_fn!(OPEN, c"open", OpenFn);
real_fn!(OPEN64, c"open64", OpenFn);
real_fn!(OPENAT, c"openat", OpenatFn);
real_fn!(OPENAT64, c"openat64", OpenatFn);
real_fn!(OPEN_2, c"__open_2", Open2Fn);
real_fn!(OPEN64_2, c"__open64_2", Open2Fn);
real_fn!(OPENAT_2, c"__openat_2", Openat2Fn);
real_fn!(OPENAT64_2, c"__openat64_2", Openat2Fn);

interpose! {
    fn open(@path, flags: c_int, mode: c_uint) -> c_int = OPEN, open(writes(flags));
    fn open64(@path, flags: c_int, mode: c_uint) -> c_int = OPEN64, open(writes(flags));
    // Only absolute paths are rewritten, for which dirfd is ignored.
    fn openat(dirfd: c_int, @path, flags: c_int, mode: c_uint) -> c_int
        = OPENAT, open(writes(flags));
    fn openat64(dirfd: c_int, @path, flags: c_int, mode: c_uint) -> c_int
        = OPENAT64, open(writes(flags));
    // The fortified opens (_FORTIFY_SOURCE): the same contract without a mode.
    fn __open_2(@path, flags: c_int) -> c_int = OPEN_2, open(writes(flags));
    fn __open64_2(@path, flags: c_int) -> c_int = OPEN64_2, open(writes(flags));
    fn __openat_2(dirfd: c_int, @path, flags: c_int) -> c_int = OPENAT_2, open(writes(flags));
    fn __openat64_2(dirfd: c_int, @path, flags: c_int) -> c_int
        = OPENAT64_2, open(writes(flags));
}

// --- stdio and directories --------------------------------------------------------------

type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut c_void;
type OpendirFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type ScandirFn =
    unsafe extern "C" fn(*const c_char, *mut c_void, *const c_void, *const c_void) -> c_int;
type ChdirFn = unsafe extern "C" fn(*const c_char) -> c_int;

real_fn!(FOPEN, c"fopen", FopenFn);
real_fn!(FOPEN64, c"fopen64", FopenFn);
real_fn!(OPENDIR, c"opendir", OpendirFn);
real_fn!(SCANDIR, c"scandir", ScandirFn);
real_fn!(SCANDIR64, c"scandir64", ScandirFn);
real_fn!(CHDIR, c"chdir", ChdirFn);

/// fopen(3) through libc's `f` (fopen or fopen64): a viewed sysfs file opened to write
/// fails as in `with_open_path`.
///
/// # Safety
/// fopen(3)'s contract: `path` and `mode` are C strings.
unsafe fn fopen_via(f: Option<FopenFn>, path: *const c_char, mode: *const c_char) -> *mut c_void {
    let Some(f) = f else {
        return no_libc(std::ptr::null_mut());
    };
    // SAFETY: function contract.
    unsafe {
        if fopen_writes(mode) && with_open_path(path, true, |_| 0) != 0 {
            return std::ptr::null_mut();
        }
        with_path(path, std::ptr::null_mut(), |p| f(p, mode))
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut c_void {
    // SAFETY: fopen(3)'s contract, forwarded.
    unsafe { fopen_via(FOPEN.FOPEN(), path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut c_void {
    // SAFETY: as fopen.
    unsafe { fopen_via(FOPEN64.FOPEN64(), path, mode) }
}

interpose! {
    fn opendir(@path) -> *mut c_void = OPENDIR, std::ptr::null_mut();
    // The list and callbacks pass through untouched.
    fn scandir(@path, list: *mut c_void, filter: *const c_void, compar: *const c_void) -> c_int
        = SCANDIR, -1;
    fn scandir64(@path, list: *mut c_void, filter: *const c_void, compar: *const c_void) -> c_int
        = SCANDIR64, -1;
    fn chdir(@path) -> c_int = CHDIR, -1;
}

// --- stat and access --------------------------------------------------------------------

type StatFn = unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int;
type FstatatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void, c_int) -> c_int;
type StatxFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut c_void) -> c_int;
type XstatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;
type FxstatatFn = unsafe extern "C" fn(c_int, c_int, *const c_char, *mut c_void, c_int) -> c_int;
type AccessFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type FaccessatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int;

real_fn!(STAT, c"stat", StatFn);
real_fn!(STAT64, c"stat64", StatFn);
real_fn!(LSTAT, c"lstat", StatFn);
real_fn!(LSTAT64, c"lstat64", StatFn);
real_fn!(FSTATAT, c"fstatat", FstatatFn);
real_fn!(FSTATAT64, c"fstatat64", FstatatFn);
real_fn!(STATX, c"statx", StatxFn);
real_fn!(XSTAT, c"__xstat", XstatFn);
real_fn!(XSTAT64, c"__xstat64", XstatFn);
real_fn!(LXSTAT, c"__lxstat", XstatFn);
real_fn!(LXSTAT64, c"__lxstat64", XstatFn);
real_fn!(FXSTATAT, c"__fxstatat", FxstatatFn);
real_fn!(FXSTATAT64, c"__fxstatat64", FxstatatFn);
real_fn!(ACCESS, c"access", AccessFn);
real_fn!(EUIDACCESS, c"euidaccess", AccessFn);
real_fn!(EACCESS, c"eaccess", AccessFn);
real_fn!(FACCESSAT, c"faccessat", FaccessatFn);

interpose! {
    fn stat(@path, buf: *mut c_void) -> c_int = STAT, -1;
    fn stat64(@path, buf: *mut c_void) -> c_int = STAT64, -1;
    fn lstat(@path, buf: *mut c_void) -> c_int = LSTAT, -1;
    fn lstat64(@path, buf: *mut c_void) -> c_int = LSTAT64, -1;
    fn fstatat(dirfd: c_int, @path, buf: *mut c_void, flags: c_int) -> c_int = FSTATAT, -1;
    fn fstatat64(dirfd: c_int, @path, buf: *mut c_void, flags: c_int) -> c_int = FSTATAT64, -1;
    fn statx(dirfd: c_int, @path, flags: c_int, mask: c_uint, buf: *mut c_void) -> c_int
        = STATX, -1;
    // The pre-2.33 glibc stat entry points: a layout version, a C string, a buffer of that
    // layout.
    fn __xstat(ver: c_int, @path, buf: *mut c_void) -> c_int = XSTAT, -1;
    fn __xstat64(ver: c_int, @path, buf: *mut c_void) -> c_int = XSTAT64, -1;
    fn __lxstat(ver: c_int, @path, buf: *mut c_void) -> c_int = LXSTAT, -1;
    fn __lxstat64(ver: c_int, @path, buf: *mut c_void) -> c_int = LXSTAT64, -1;
    fn __fxstatat(ver: c_int, dirfd: c_int, @path, buf: *mut c_void, flags: c_int) -> c_int
        = FXSTATAT, -1;
    fn __fxstatat64(ver: c_int, dirfd: c_int, @path, buf: *mut c_void, flags: c_int) -> c_int
        = FXSTATAT64, -1;
    fn access(@path, mode: c_int) -> c_int = ACCESS, -1;
    fn euidaccess(@path, mode: c_int) -> c_int = EUIDACCESS, -1;
    fn eaccess(@path, mode: c_int) -> c_int = EACCESS, -1;
    fn faccessat(dirfd: c_int, @path, mode: c_int, flags: c_int) -> c_int = FACCESSAT, -1;
}

// --- links and canonical names ----------------------------------------------------------

type ReadlinkFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> isize;
type ReadlinkatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_char, usize) -> isize;
type RealpathFn = unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char;

real_fn!(READLINK, c"readlink", ReadlinkFn);
real_fn!(READLINKAT, c"readlinkat", ReadlinkatFn);
real_fn!(REALPATH, c"realpath", RealpathFn);

interpose! {
    fn readlink(@path, buf: *mut c_char, size: usize) -> isize = READLINK, -1;
    fn readlinkat(dirfd: c_int, @path, buf: *mut c_char, size: usize) -> isize = READLINKAT, -1;
}

#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
    buflen: usize,
) -> isize {
    if size > buflen {
        // What glibc's checking version does on a lying size: abort.
        std::process::abort();
    }
    // SAFETY: the fortified readlink, with `size` checked against the buffer's length.
    unsafe { readlink(path, buf, size) }
}

#[no_mangle]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
    buflen: usize,
) -> isize {
    if size > buflen {
        std::process::abort();
    }
    // SAFETY: as __readlink_chk.
    unsafe { readlinkat(dirfd, path, buf, size) }
}

/// realpath(3) of a viewed path: resolved inside the view, then expressed as a path under
/// the viewed prefixes again, so a program that canonicalises `/sys/class/infiniband/x`
/// and then opens the result stays in the view. A path that leaves the view through a
/// symlink (`device/net/lo`) resolves to where it leads.
///
/// # Safety
/// realpath(3)'s contract: `path` a C string, `resolved` NULL or `PATH_MAX` bytes.
unsafe fn realpath_impl(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    let Some(f) = REALPATH.REALPATH() else {
        return no_libc(std::ptr::null_mut());
    };
    // SAFETY: forwarded contract.
    let rewritten = match unsafe { rewrite(path) } {
        None => return unsafe { f(path, resolved) },
        Some(None) => {
            set_errno(libc::ENOENT);
            return std::ptr::null_mut();
        }
        Some(Some(p)) => p,
    };
    // SAFETY: a C string we own; NULL asks libc to allocate the result.
    let got = unsafe { f(rewritten.as_ptr(), std::ptr::null_mut()) };
    if got.is_null() {
        return got;
    }
    // SAFETY: libc returned a malloc'd C string, freed below.
    let text = unsafe { CStr::from_ptr(got) }.to_bytes().to_vec();
    // SAFETY: `got` came from malloc inside realpath.
    unsafe { libc::free(got.cast()) };
    let root = crate::view::root().map(|r| r.as_os_str().as_bytes().to_vec());
    let shown = match root {
        Some(r) if text.starts_with(&r) && matches!(text.get(r.len()), Some(b'/')) => {
            text[r.len()..].to_vec()
        }
        _ => text,
    };
    if shown.len() >= libc::PATH_MAX as usize {
        set_errno(libc::ENAMETOOLONG);
        return std::ptr::null_mut();
    }
    let out = if resolved.is_null() {
        // SAFETY: malloc of the result plus its NUL; the caller frees it (realpath(3)).
        let m = unsafe { libc::malloc(shown.len() + 1) }.cast::<c_char>();
        if m.is_null() {
            set_errno(libc::ENOMEM);
            return m;
        }
        m
    } else {
        resolved
    };
    // SAFETY: `out` holds at least PATH_MAX (caller's) or len + 1 (ours) bytes, and
    // `shown.len() < PATH_MAX`; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(shown.as_ptr().cast::<c_char>(), out, shown.len());
        *out.add(shown.len()) = 0;
    }
    out
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: realpath(3)'s contract, forwarded.
    unsafe { realpath_impl(path, resolved) }
}

#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    resolvedlen: usize,
) -> *mut c_char {
    if !resolved.is_null() && resolvedlen < libc::PATH_MAX as usize {
        std::process::abort();
    }
    // SAFETY: the fortified realpath, with the buffer's length checked.
    unsafe { realpath_impl(path, resolved) }
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: canonicalize_file_name(3) is realpath(path, NULL).
    unsafe { realpath_impl(path, std::ptr::null_mut()) }
}

// --- extended attributes ----------------------------------------------------------------
//
// `ls -l` asks for a file's security label and ACL by path; without these a viewed file
// it has just listed would be reported missing.

type GetxattrFn = unsafe extern "C" fn(*const c_char, *const c_char, *mut c_void, usize) -> isize;
type ListxattrFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> isize;

real_fn!(GETXATTR, c"getxattr", GetxattrFn);
real_fn!(LGETXATTR, c"lgetxattr", GetxattrFn);
real_fn!(LISTXATTR, c"listxattr", ListxattrFn);
real_fn!(LLISTXATTR, c"llistxattr", ListxattrFn);

interpose! {
    fn getxattr(@path, name: *const c_char, value: *mut c_void, size: usize) -> isize
        = GETXATTR, -1;
    fn lgetxattr(@path, name: *const c_char, value: *mut c_void, size: usize) -> isize
        = LGETXATTR, -1;
    fn listxattr(@path, list: *mut c_char, size: usize) -> isize = LISTXATTR, -1;
    fn llistxattr(@path, list: *mut c_char, size: usize) -> isize = LLISTXATTR, -1;
}
