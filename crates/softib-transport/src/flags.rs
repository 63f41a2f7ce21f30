//! A tiny bit-set helper so verbs flag types read like the C constants they mirror,
//! without pulling in another dependency.

/// Declares a transparent bit-set newtype with named constants and the usual operators.
macro_rules! bit_flags {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($ty:ty) {
            $( $(#[$fmeta:meta])* const $flag:ident = $value:expr; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $ty);

        impl $name {
            $( $(#[$fmeta])* pub const $flag: $name = $name($value); )*
            /// No flag set.
            pub const fn empty() -> Self { $name(0) }
            /// Every flag this type names.
            pub const fn all() -> Self { $name(0 $(| $value)*) }
            /// The raw bits.
            pub const fn bits(self) -> $ty { self.0 }
            /// True when every flag of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
            /// True when any flag of `other` is set in `self`.
            pub const fn intersects(self, other: Self) -> bool { self.0 & other.0 != 0 }
            /// The flags set in either (usable in constants).
            pub const fn union(self, other: Self) -> Self { $name(self.0 | other.0) }
            /// True when no flag is set.
            pub const fn is_empty(self) -> bool { self.0 == 0 }
            /// Sets or clears the flags of `other`.
            pub fn set(&mut self, other: Self, on: bool) {
                if on { self.0 |= other.0 } else { self.0 &= !other.0 }
            }
            /// The flags of `self` that are not in `other`.
            pub const fn difference(self, other: Self) -> Self { $name(self.0 & !other.0) }
            /// The named flags set in `self`, lowest bit first.
            pub fn names(self) -> impl Iterator<Item = &'static str> {
                [$( ($value, stringify!($flag)) ),*]
                    .into_iter()
                    .filter(move |(v, _)| self.0 & *v != 0)
                    .map(|(_, n)| n)
            }
        }
        impl core::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self { $name(self.0 | rhs.0) }
        }
        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) { self.0 |= rhs.0 }
        }
        impl core::ops::BitAnd for $name {
            type Output = Self;
            fn bitand(self, rhs: Self) -> Self { $name(self.0 & rhs.0) }
        }
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                let mut first = true;
                for n in self.names() {
                    if !first { write!(f, " | ")?; }
                    first = false;
                    write!(f, "{n}")?;
                }
                write!(f, ")")
            }
        }
    };
}

pub(crate) use bit_flags;
