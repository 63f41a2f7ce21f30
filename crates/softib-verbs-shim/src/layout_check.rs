//! The tables the ABI modules ([`crate::abi`], [`crate::abi_ex`], [`crate::rdmacm::abi`])
//! give the layout tests: each pairs a C expression with the Rust value of the same thing,
//! and `tests/layout.rs` / `tests/rdmacm_layout.rs` compile the C side against the
//! installed headers and compare. One set of macros, so every table spells its C the same
//! way and names a constant once.

/// `&[(C name, value as i64), ...]` for constants named as their C enum values are.
macro_rules! checked_constants {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), $name as i64)),*]
    };
}

/// The C type of a Rust ABI type of the same name: `struct T`, or `union T` for the
/// unions C declares.
macro_rules! c_type {
    (ibv_gid) => {
        "union ibv_gid"
    };
    ($t:ident) => {
        concat!("struct ", stringify!($t))
    };
}

/// `("sizeof(struct T)", size_of::<T>())`.
macro_rules! c_size {
    ($t:ident) => {
        (
            concat!("sizeof(", $crate::layout_check::c_type!($t), ")"),
            ::std::mem::size_of::<$t>(),
        )
    };
}

/// `("offsetof(struct T, f)", offset_of!(T, f))`; the third form names a field whose C name
/// is a Rust keyword (`type_` for `type`).
macro_rules! c_offset {
    ($t:ident, $f:ident) => {
        $crate::layout_check::c_offset!($t, $f, stringify!($f))
    };
    ($t:ident, $f:ident, $c:expr) => {
        (
            concat!(
                "offsetof(",
                $crate::layout_check::c_type!($t),
                ", ",
                $c,
                ")"
            ),
            ::std::mem::offset_of!($t, $f),
        )
    };
}

pub(crate) use {c_offset, c_size, c_type, checked_constants};
