//! The RDMA stack the loaded libibverbs belongs to: distribution (inbox) rdma-core or
//! NVIDIA's MLNX_OFED / DOCA-OFED, and the rdma-core release it is built from, read from the
//! library's real file name ([`Stack`], [`StackKind`]).

use std::fmt;

use rdma_verbs_sys as sys;

use crate::error::Result;

/// Who built the loaded rdma-core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StackKind {
    /// Upstream rdma-core as distributions ship it (`44.0`, `56.1`).
    Inbox,
    /// NVIDIA's MLNX_OFED / DOCA-OFED, recognised by its numbering: a `mlnx` tag
    /// (`2410mlnx54`) or a YYMM-based release of 4+ digits (`2410068.0`).
    MlnxOfed,
}

impl fmt::Display for StackKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StackKind::Inbox => "inbox rdma-core",
            StackKind::MlnxOfed => "MLNX_OFED / DOCA-OFED",
        })
    }
}

/// The stack of a loaded libibverbs: its [`StackKind`], its release as the file name spells
/// it, and the upstream rdma-core version it corresponds to.
///
/// | file name | [`release`](Stack::release) | [`kind`](Stack::kind) | [`rdma_core`](Stack::rdma_core) |
/// |---|---|---|---|
/// | `libibverbs.so.1.14.44.0` | `44.0` | [`Inbox`](StackKind::Inbox) | `Some((44, 0))` |
/// | `libibverbs.so.1.14.2410mlnx54` | `2410mlnx54` | [`MlnxOfed`](StackKind::MlnxOfed) | `Some((54, 0))` |
/// | `libibverbs.so.1.14.2410068.0` | `2410068.0` | [`MlnxOfed`](StackKind::MlnxOfed) | `None` |
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stack {
    kind: StackKind,
    release: String,
    rdma_core: Option<(u32, u32)>,
}

impl Stack {
    /// The stack of the process-wide libibverbs ([`sys::ibverbs`]), loading it if need be;
    /// `None` when its file name carries no release (see [`Stack::of`]).
    ///
    /// # Errors
    ///
    /// [`Error::Load`](crate::Error::Load) when libibverbs cannot be loaded.
    pub fn loaded() -> Result<Option<Stack>> {
        Ok(Stack::of(sys::ibverbs()?))
    }

    /// The stack of `verbs`, from its real file name ([`sys::Ibverbs::rdma_core_version`]);
    /// `None` when the name carries no release (a bare `libibverbs.so.1`, a mock library).
    pub fn of(verbs: &sys::Ibverbs) -> Option<Stack> {
        Stack::from_release(&verbs.rdma_core_version()?)
    }

    /// Parses a release as it follows `libibverbs.so.1.<ABI>.` in the file name; `None` when
    /// it is empty.
    fn from_release(release: &str) -> Option<Stack> {
        if release.is_empty() {
            return None;
        }
        let upstream = release.split('.').next().unwrap_or_default();
        let (kind, rdma_core) = match release.split_once("mlnx") {
            // `<MOFED release>mlnx<rdma-core major>[.<minor>]`
            Some((_, base)) => (StackKind::MlnxOfed, major_minor(base)),
            None if upstream.len() >= 4 && upstream.bytes().all(|b| b.is_ascii_digit()) => {
                (StackKind::MlnxOfed, None)
            }
            None => (StackKind::Inbox, major_minor(release)),
        };
        Some(Stack { kind, release: release.to_owned(), rdma_core })
    }

    /// Inbox rdma-core or MLNX_OFED / DOCA-OFED.
    pub fn kind(&self) -> StackKind {
        self.kind
    }

    /// The release as the file name spells it (`44.0`, `2410mlnx54`).
    pub fn release(&self) -> &str {
        &self.release
    }

    /// The upstream rdma-core version as `(major, minor)` (`(44, 0)`; `(54, 0)` for
    /// `2410mlnx54`), comparable as a tuple; `None` when the numbering does not tell it (a
    /// MLNX_OFED build number such as `2410068.0`).
    pub fn rdma_core(&self) -> Option<(u32, u32)> {
        self.rdma_core
    }
}

impl fmt::Display for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.release)
    }
}

/// `major[.minor…]` at the start of `s`: the leading digits, then those after a dot (0 when
/// absent); `None` without leading digits.
fn major_minor(s: &str) -> Option<(u32, u32)> {
    let (major, rest) = digits(s);
    let major = major.parse().ok()?;
    let minor = rest.strip_prefix('.').map_or("", |r| digits(r).0);
    Some((major, minor.parse().unwrap_or(0)))
}

/// The leading ASCII digits of `s`, and the rest.
fn digits(s: &str) -> (&str, &str) {
    s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(release: &str) -> (StackKind, Option<(u32, u32)>) {
        let stack = Stack::from_release(release).expect("a release");
        assert_eq!(stack.release(), release);
        (stack.kind(), stack.rdma_core())
    }

    #[test]
    fn releases_give_their_kind_and_rdma_core_version() {
        use StackKind::{Inbox, MlnxOfed};
        for (release, kind, rdma_core) in [
            ("33.2", Inbox, Some((33, 2))),
            ("44.0", Inbox, Some((44, 0))),
            ("56.1", Inbox, Some((56, 1))),
            ("50", Inbox, Some((50, 0))),
            ("2307mlnx47", MlnxOfed, Some((47, 0))),
            ("2410mlnx54", MlnxOfed, Some((54, 0))),
            ("2507mlnx58", MlnxOfed, Some((58, 0))),
            ("56mlnx40.1", MlnxOfed, Some((40, 1))),
            ("2410068.0", MlnxOfed, None),
        ] {
            assert_eq!(parse(release), (kind, rdma_core), "{release}");
        }
    }

    #[test]
    fn an_empty_release_is_none_and_nvidias_is_shown_with_its_name() {
        assert_eq!(Stack::from_release(""), None);
        let stack = Stack::from_release("2410mlnx54").expect("a release");
        assert_eq!(stack.to_string(), "MLNX_OFED / DOCA-OFED 2410mlnx54");
    }
}
