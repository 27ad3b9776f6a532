//! The calls that consume a value (a queue pair, a buffer) come in twins: the `try_` one hands
//! the value back in its error ([`TransitionError`](crate::TransitionError),
//! [`PostError`](crate::PostError), …), the plain one returns the `'static` [`Error`] alone,
//! which works with `?` anywhere (the value is then dropped, or back in its pool). [`try_twin!`]
//! defines both from one body.

/// Defines a call and its `try_` twin from the `try_` twin's signature and body, which
/// returns `Result<T, E>` with an `E` that converts into an [`Error`](crate::Error): the
/// `try_` twin returns that; the plain one runs the same body (so that it costs no more than
/// the `try_` one) and returns `Result<T>`, the error converted. The attributes before `fn`
/// are the plain twin's, those after `try:` the `try_` twin's.
macro_rules! try_twin {
    (
        $(#[$attr:meta])*
        pub fn $plain:ident / $try_:ident
            $(<$($($lt:lifetime)? $($tp:ident $(: $bound:path)?)?),+>)?
            ($($params:tt)*) -> Result<$ok:ty, $err:ty>
        $(where $($wlt:lifetime: $wbound:lifetime),+)?
        try: $(#[$try_attr:meta])*
        $body:block
    ) => {
        $(#[$attr])*
        pub fn $plain $(<$($($lt)? $($tp $(: $bound)?)?),+>)? ($($params)*) -> $crate::Result<$ok>
        $(where $($wlt: $wbound),+)?
        {
            // (In a closure, as the body's `return`s and `?`s are the `try_` twin's.)
            #[allow(clippy::redundant_closure_call)]
            let result: ::std::result::Result<$ok, $err> = (move || $body)();
            result.map_err($crate::Error::from)
        }

        $(#[$try_attr])*
        pub fn $try_ $(<$($($lt)? $($tp $(: $bound)?)?),+>)? ($($params)*)
            -> ::std::result::Result<$ok, $err>
        $(where $($wlt: $wbound),+)?
        $body
    };
}
pub(crate) use try_twin;
