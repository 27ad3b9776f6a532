//! A bandwidth test on several devices at once: `-d mlx5_0,mlx5_1` (perftest's `-d` takes one
//! device; a list is this crate's). Each device runs the test of one device (its own
//! `-q` QPs, PD, CQ and memory, on its own thread, over its own TCP channel on port `-p` +
//! its place in the list), so device `k` of the client meets device `k` of the server. All
//! devices of a side start each size together, and the table has one line per size for them
//! all: their messages summed, over the longest of their times (the sizes overlap, so this is
//! what the devices moved together), and their peaks summed.

use std::net::TcpListener;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::args::Args;
use super::exchange::Control;
use super::report::{Report, Table};
use super::traffic::Stats;
use super::{Error, Mode};

/// How long a server waits for the peer's channels of the devices after the first, once the
/// first agreed: the peer opens them at once, unless its test failed on that device.
const OTHERS_CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Why a device's test stopped when another's failed.
const ANOTHER_FAILED: &str = "stopped: another device's test failed";

/// The devices of one side and what their threads share.
pub struct Devices {
    names: Vec<String>,
    /// The server's TCP sockets, one per device, bound before any client may come;
    /// non-blocking, so that a wait for a client that will not come ends.
    listeners: Vec<TcpListener>,
    state: Mutex<State>,
    /// Wakes the threads waiting in [`Devices::start_together`] or
    /// [`Devices::first_agreed`].
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Threads at the start of the current size.
    arrived: usize,
    /// Sizes every thread has started.
    generation: u64,
    /// A thread failed: the others stop rather than wait for it.
    failed: bool,
    /// The first device's TCP channel agreed on the parameters (and the number of devices).
    agreed: bool,
    /// Each size's figures so far, by device, until all are in.
    lines: Vec<Option<Stats>>,
}

impl Devices {
    /// `names`, with the server's sockets bound on ports `port`, `port` + 1, ... (none for
    /// the client).
    fn new(names: Vec<String>, server: bool, port: u16) -> Result<Devices, Error> {
        let lines = names.iter().map(|_| None).collect();
        let listeners = match server {
            true => (0..names.len())
                .map(|i| {
                    let listener = Control::listen(port + i as u16)?;
                    // (Accepted by polling, see `Devices::accept`.)
                    listener.set_nonblocking(true)?;
                    Ok::<_, Error>(listener)
                })
                .collect::<Result<_, _>>()?,
            false => Vec::new(),
        };
        Ok(Devices {
            names,
            listeners,
            state: Mutex::new(State { lines, ..State::default() }),
            changed: Condvar::new(),
        })
    }

    /// The devices, in the `-d` list's order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// As the server: the TCP channel of device `index`, once its client comes. The first
    /// device's client is the peer, waited for as long as a server of one device waits; the
    /// others' come right after the first agreed ([`Devices::first_agreed`]), so a peer whose
    /// test failed on one of them first is not waited for past [`OTHERS_CONNECT_WITHIN`]. An
    /// error too when another device's test failed meanwhile.
    pub fn accept(&self, index: usize) -> Result<Control, Error> {
        let since = Instant::now();
        let late = || index > 0 && since.elapsed() > OTHERS_CONNECT_WITHIN;
        let stop = || self.lock().failed || late();
        match Control::accept_unless(&self.listeners[index], stop)? {
            Some(control) => Ok(control),
            None if late() => Err(format!(
                "the peer's {} never connected within {} s of the first device: its test failed \
                 there (its output says why)",
                self.names[index],
                OTHERS_CONNECT_WITHIN.as_secs()
            )
            .into()),
            None => Err(ANOTHER_FAILED.into()),
        }
    }

    /// Waits for `cond` of the state to hold, or a thread to fail.
    fn wait_until(
        &self,
        mut cond: impl FnMut(&State) -> bool,
    ) -> Result<MutexGuard<'_, State>, Error> {
        let mut state = self.lock();
        while !cond(&state) && !state.failed {
            state = self.changed.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        match state.failed {
            true => Err(ANOTHER_FAILED.into()),
            false => Ok(state),
        }
    }

    /// Device `index` (not the first) waits until the first device's channel has agreed on
    /// the parameters: a peer that differs is refused there, before any other channel opens.
    pub fn first_agreed(&self, index: usize) -> Result<(), Error> {
        debug_assert!(index > 0);
        self.wait_until(|state| state.agreed).map(drop)
    }

    /// The first device's channel agreed: the others may open theirs.
    pub fn agreed(&self) {
        self.lock().agreed = true;
        self.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A thread that panicked while holding the lock left nothing half-written that the
        // others read: counts and whole lines.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until every device's thread is at the start of the next size.
    ///
    /// # Errors
    ///
    /// Another device's thread failed.
    pub fn start_together(&self) -> Result<(), Error> {
        let mut state = self.lock();
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.names.len() {
            state.arrived = 0;
            state.generation += 1;
            self.changed.notify_all();
        }
        drop(state);
        self.wait_until(|state| state.generation != generation).map(drop)
    }

    /// Releases the other threads: this one will not come.
    fn fail(&self) {
        self.lock().failed = true;
        self.changed.notify_all();
    }
}

/// The table of device `index`: the first prints the header (with the devices), and whichever
/// gives the last figures of a size prints the line of them all.
pub struct Share<'a> {
    pub devices: &'a Devices,
    pub index: usize,
    pub report: Report,
}

impl Table for Share<'_> {
    type Line = Stats;

    fn header(&self) {
        if self.index == 0 {
            let _printing = self.devices.lock();
            self.report.header();
        }
    }

    fn line(&self, size: u32, stats: &Stats) {
        let mut state = self.devices.lock();
        state.lines[self.index] = Some(stats.clone());
        if state.lines.iter().all(Option::is_some) {
            let all: Vec<Stats> = state.lines.iter_mut().filter_map(Option::take).collect();
            self.report.line(size, &together(&all));
        }
    }

    fn json(&self) -> bool {
        self.report.json
    }

    /// Printed by [`run`] once every device is done.
    fn footer(&self) {}
}

/// The figures of devices that ran a size at the same time: messages summed over the longest
/// time, peaks summed; with -b, the peers' likewise.
fn together(all: &[Stats]) -> Stats {
    let peers: Option<Vec<Stats>> = all.iter().map(|s| s.peer.as_deref().cloned()).collect();
    Stats {
        posted: all.iter().map(|s| s.posted).sum(),
        completed: all.iter().map(|s| s.completed).sum(),
        received: all.iter().map(|s| s.received).sum(),
        elapsed: all.iter().map(|s| s.elapsed).max().unwrap_or_default(),
        peak: all.iter().map(|s| s.peak).sum(),
        peer: peers.map(|p| Box::new(together(&p))),
    }
}

/// The test of `mode` on each device of `names`, each on its own thread; the first failure,
/// naming its device.
pub fn run(mode: Mode, args: &Args, names: Vec<String>) -> Result<(), Error> {
    let devices = Devices::new(names, args.server.is_none(), args.port)?;
    let failures: Vec<String> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..devices.names.len())
            .map(|index| {
                let devices = &devices;
                scope.spawn(move || {
                    let name = &devices.names[index];
                    let mut args = args.clone();
                    args.ib_dev = Some(name.clone());
                    args.port += index as u16;
                    let ran = super::run_device(mode, &args, Some((devices, index)));
                    ran.map_err(|e| {
                        devices.fail();
                        format!("{name}: {e}")
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .filter_map(|t| match t.join() {
                Ok(ran) => ran.err(),
                Err(_) => {
                    devices.fail();
                    Some("a device's thread panicked".into())
                }
            })
            .collect()
    });
    // The one that failed says why; the others only that they stopped for it.
    match failures.iter().find(|f| !f.ends_with(ANOTHER_FAILED)).or(failures.first()) {
        Some(first) => Err(first.clone().into()),
        None => {
            if !args.json {
                println!("{}", super::report::RULE);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(completed: u64, millis: u64, peak: f64) -> Stats {
        let elapsed = Duration::from_millis(millis);
        Stats { posted: completed, completed, elapsed, peak, ..Stats::default() }
    }

    #[test]
    fn devices_together_move_their_sum_over_the_longest_time() {
        let mut a = stats(100, 40, 2.0);
        let mut b = stats(300, 50, 3.0);
        a.peer = Some(Box::new(stats(10, 20, 1.0)));
        b.peer = Some(Box::new(stats(30, 10, 1.0)));
        let both = together(&[a, b]);
        assert_eq!(
            (both.posted, both.completed, both.elapsed),
            (400, 400, Duration::from_millis(50))
        );
        assert_eq!(both.peak, 5.0);
        assert_eq!(both.peer.as_deref(), Some(&Stats { peak: 2.0, ..stats(40, 20, 0.0) }));
        let one_without = [stats(1, 1, 0.0), Stats { peer: both.peer.clone(), ..stats(1, 1, 0.0) }];
        assert_eq!(together(&one_without).peer, None, "-b is on both devices or on neither");
    }

    #[test]
    fn a_device_that_fails_releases_the_others_waits() {
        let devices = Devices::new(vec!["a".into(), "b".into(), "c".into()], false, 0).unwrap();
        std::thread::scope(|scope| {
            let start = scope.spawn(|| devices.start_together().map_err(|e| e.to_string()));
            let open = scope.spawn(|| devices.first_agreed(1).map_err(|e| e.to_string()));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!start.is_finished() && !open.is_finished(), "they wait for the others");
            devices.fail();
            for waited in [start.join().unwrap(), open.join().unwrap()] {
                assert_eq!(waited.unwrap_err(), ANOTHER_FAILED);
            }
        });
    }

    #[test]
    fn a_server_stops_waiting_for_a_client_once_another_device_failed() {
        // One device, on a port the system picks.
        let devices = Devices::new(vec!["a".into()], true, 0).unwrap();
        std::thread::scope(|scope| {
            let accept = scope.spawn(|| devices.accept(0).map(drop).map_err(|e| e.to_string()));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!accept.is_finished(), "it waits for its client");
            devices.fail();
            assert_eq!(accept.join().unwrap().unwrap_err(), ANOTHER_FAILED);
        });
    }

    #[test]
    fn the_devices_start_each_size_together() {
        let devices = Devices::new(vec!["a".into(), "b".into()], false, 0).unwrap();
        std::thread::scope(|scope| {
            let first = scope.spawn(|| devices.start_together().map_err(|e| e.to_string()));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!first.is_finished(), "it waits for the second device");
            devices.start_together().unwrap();
            first.join().unwrap().unwrap();
        });
    }
}
