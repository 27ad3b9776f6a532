//! Newtypes for C enums.
//!
//! A C enum is never a Rust enum here: a newer libibverbs may return a value this build never
//! saw, which would be undefined behaviour for a Rust enum. Each newtype holds the raw value,
//! names the known ones as associated constants (usable in `match` patterns) and displays
//! unknown ones as `unknown (N)`.

/// Declares a newtype over a C enum with named constants and a `Display` that names them.
macro_rules! c_enum {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($raw:ty) {
            $( $(#[$cmeta:meta])* $konst:ident = $value:expr => $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(transparent)]
        pub struct $name(pub $raw);

        impl $name {
            $( $(#[$cmeta])* pub const $konst: Self = Self($value as $raw); )*

            /// The name of a known value, `None` for a value this build does not know.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $( Self::$konst => Some($text), )*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, "unknown ({})", self.0),
                }
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({self})", stringify!($name))
            }
        }
    };
}

pub(crate) use c_enum;
