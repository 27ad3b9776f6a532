//! Type-level QP states (zero-sized markers).

mod sealed {
    pub trait Sealed {}
}

use super::modify::QueuePairState;

/// A queue pair state tracked in the type: [`Reset`], [`Init`], [`Rtr`], [`Rts`], or
/// [`Unknown`] after [`modify_raw`](crate::QueuePair::modify_raw).
pub trait QpState: sealed::Sealed {
    /// The state's name, as in the verbs specification.
    const NAME: &'static str;
    /// The state as the device reports it; `None` for [`Unknown`].
    const STATE: Option<QueuePairState>;
}

/// States in which receives may be posted: [`Init`], [`Rtr`], [`Rts`].
pub trait ReceiveReady: QpState {}

macro_rules! states {
    ($( $(#[$doc:meta])* $name:ident => $text:literal, $state:expr, receive: $recv:tt; )*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {}
        impl sealed::Sealed for $name {}
        impl QpState for $name {
            const NAME: &'static str = $text;
            const STATE: Option<QueuePairState> = $state;
        }
        states!(@recv $name $recv);
    )*};
    (@recv $name:ident true) => { impl ReceiveReady for $name {} };
    (@recv $name:ident false) => {};
}

states! {
    /// RESET: just created (or reset); nothing can be posted.
    Reset => "RESET", Some(QueuePairState::RESET), receive: false;
    /// INIT: bound to a port; receives may be posted.
    Init => "INIT", Some(QueuePairState::INIT), receive: true;
    /// RTR, Ready To Receive: connected to the peer; receives are processed.
    Rtr => "RTR", Some(QueuePairState::RTR), receive: true;
    /// RTS, Ready To Send: sends may be posted.
    Rts => "RTS", Some(QueuePairState::RTS), receive: true;
    /// Whatever [`modify_raw`](crate::QueuePair::modify_raw) left: ask
    /// [`query_state`](crate::QueuePair::query_state), then
    /// [`into_checked`](crate::QueuePair::into_checked).
    Unknown => "unknown", None, receive: false;
}
