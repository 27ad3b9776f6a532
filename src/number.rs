//! The style of the crate's key and identifier newtypes ([`Lid`](crate::Lid),
//! [`LKey`](crate::LKey), [`RKey`](crate::RKey), [`Qpn`](crate::Qpn), [`Psn`](crate::Psn),
//! DC keys): a private field, `new` (checked where the wire holds fewer bits than the Rust
//! type: `Qpn`, `Psn`) and `get`, `From` the raw value where every value is valid and into
//! it always, shown in hex as the C tools print them, `Debug` as `Name(shown)`.

/// Declares a newtype in that style over `$raw`, every value of which is valid, `Display`ed
/// with `$shown` (a format string for the raw value).
macro_rules! number {
    ($(#[$meta:meta])* pub struct $name:ident($raw:ty), shown: $shown:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name($raw);

        impl $name {
            #[doc = concat!("The ", stringify!($name), " `value`.")]
            #[must_use]
            #[inline]
            pub const fn new(value: $raw) -> $name {
                $name(value)
            }

            /// The value.
            #[must_use]
            #[inline]
            pub const fn get(self) -> $raw {
                self.0
            }
        }

        impl From<$raw> for $name {
            #[inline]
            fn from(value: $raw) -> $name {
                $name(value)
            }
        }

        $crate::number::shown!($name($raw), $shown);
    };
}

/// `From<$name> for $raw`, `Display` with `$shown` and `Debug` as `Name(shown)`, for
/// [`number!`] and the checked newtypes.
macro_rules! shown {
    ($name:ident($raw:ty), $shown:literal) => {
        impl From<$name> for $raw {
            #[inline]
            fn from(value: $name) -> $raw {
                value.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, $shown, self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({self})", stringify!($name))
            }
        }
    };
}

pub(crate) use number;
pub(crate) use shown;
