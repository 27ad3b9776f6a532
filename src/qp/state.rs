//! Type-level QP states (zero-sized markers).

mod sealed {
    pub trait Sealed {}
}

/// A queue pair state known at compile time: [`Reset`], [`Init`], [`Rtr`] or [`Rts`].
pub trait QpState: sealed::Sealed {
    /// The state's name, as in the verbs specification.
    const NAME: &'static str;
}

/// States in which receives may be posted: [`Init`], [`Rtr`], [`Rts`].
pub trait ReceiveReady: QpState {}

macro_rules! states {
    ($( $(#[$doc:meta])* $name:ident => $text:literal, receive: $recv:tt; )*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {}
        impl sealed::Sealed for $name {}
        impl QpState for $name {
            const NAME: &'static str = $text;
        }
        states!(@recv $name $recv);
    )*};
    (@recv $name:ident true) => { impl ReceiveReady for $name {} };
    (@recv $name:ident false) => {};
}

states! {
    /// RESET: just created (or reset); nothing can be posted.
    Reset => "RESET", receive: false;
    /// INIT: bound to a port; receives may be posted.
    Init => "INIT", receive: true;
    /// RTR, Ready To Receive: connected to the peer; receives are processed.
    Rtr => "RTR", receive: true;
    /// RTS, Ready To Send: sends may be posted.
    Rts => "RTS", receive: true;
}
