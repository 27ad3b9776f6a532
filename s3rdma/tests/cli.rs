//! The client commands (`ls`, `get`, `put`, `rm`, `mb`, `bench`) of the `s3rdma` binary
//! against `s3rdma serve` over a temporary root, over HTTP and HTTPS.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const S3RDMA: &str = env!("CARGO_BIN_EXE_s3rdma");

/// `s3rdma serve` on a free port over a fresh root, killed when dropped.
struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT` or `https://localhost:PORT`.
    endpoint: String,
    /// 127.0.0.1:PORT.
    addr: String,
    root: tempfile::TempDir,
}

/// The command `s3rdma ARGS`, with the test's key in the environment.
fn s3rdma(args: &[&str]) -> Command {
    let mut command = Command::new(S3RDMA);
    command
        .args(args)
        .env("S3RDMA_ACCESS_KEY_ID", "cli-key")
        .env("S3RDMA_SECRET_ACCESS_KEY", "cli-secret");
    command
}

impl Served {
    fn start(extra: &[&str]) -> Served {
        let root = tempfile::tempdir().unwrap();
        let mut args = vec!["serve", "--root", root.path().to_str().unwrap()];
        args.extend(["--listen", "127.0.0.1:0", "--rdma", "off"]);
        args.extend(extra);
        let mut child = s3rdma(&args).stdout(Stdio::piped()).spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        // "s3rdma: serving ROOT (...) on SCHEME://ADDR for access key(s) ..."
        while !line.contains(" on http") {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "serve exited");
        }
        let url = line.split(" on ").nth(1).unwrap().split(' ').next().unwrap();
        let (scheme, addr) = url.split_once("://").unwrap();
        let endpoint = match scheme {
            "https" => format!("https://localhost:{}", addr.rsplit_once(':').unwrap().1),
            _ => url.to_owned(),
        };
        // Its later lines are not read: the pipe is drained so that it never blocks.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        Served { child, endpoint, addr: addr.to_owned(), root }
    }

    /// `s3rdma COMMAND --endpoint ENDPOINT ARGS`.
    fn run(&self, command: &str, args: &[&str]) -> Output {
        let mut all = vec![command, "--endpoint", &self.endpoint];
        all.extend(args);
        s3rdma(&all).output().unwrap()
    }

    /// As [`Served::run`], which must succeed: its stdout.
    fn ok(&self, command: &str, args: &[&str]) -> String {
        let output = self.run(command, args);
        assert!(
            output.status.success(),
            "s3rdma {command} {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The keys an `ls BUCKET[/PREFIX]` printed (its lines' last fields).
fn keys(listing: &str) -> Vec<&str> {
    listing.lines().map(|line| line.rsplit(' ').next().unwrap()).collect()
}

/// `len` bytes that differ from byte to byte.
fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 251) as u8).collect()
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_owned()
}

#[test]
fn ls_pages_get_ranges_rm_deletes_and_bench_runs() {
    let served = Served::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let file = path(dir.path(), "object");
    let body = data(100_000);
    std::fs::write(&file, &body).unwrap();

    served.ok("mb", &["listed"]);
    let mut written = Vec::new();
    for key in ["a/1", "a/2", "a/3", "a/4", "a/5", "b/1"] {
        served.ok("put", &[&file, &format!("listed/{key}")]);
        written.push(key);
    }
    assert!(served.ok("ls", &[]).lines().any(|line| line.ends_with("  listed")));
    // Three pages of two keys, then one of none past the prefix.
    assert_eq!(keys(&served.ok("ls", &["--page-size", "2", "listed"])), written);
    assert_eq!(keys(&served.ok("ls", &["--page-size", "2", "listed/a/"])), written[..5]);
    let line = served.ok("ls", &["listed/b/"]);
    assert!(line.contains(" 100000  b/1"), "{line}");

    let got = path(dir.path(), "got");
    served.ok("get", &["--range", "99990-", "listed/a/3", &got]);
    assert_eq!(std::fs::read(&got).unwrap(), &body[99_990..]);
    served.ok("get", &["--range", "1000-1999", "listed/a/3", &got]);
    assert_eq!(std::fs::read(&got).unwrap(), &body[1000..2000]);
    served.ok("get", &["listed/a/3", &got]);
    assert!(std::fs::read(&got).unwrap() == body);
    let past = served.run("get", &["--range", "100000-", "listed/a/3", &got]);
    assert!(!past.status.success());

    served.ok("rm", &["listed/a/3"]);
    assert_eq!(keys(&served.ok("ls", &["listed/a/"])), ["a/1", "a/2", "a/4", "a/5"]);
    assert!(!served.run("get", &["listed/a/3", &got]).status.success());

    // The server has no RDMA: bench runs over plain S3, then deletes its objects.
    let table = served.ok("bench", &["--count", "3", "--size", "4K", "listed/bench-"]);
    let rows: Vec<Vec<&str>> =
        table.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 2, "{table}");
    for (row, op) in rows.iter().zip(["PUT", "GET"]) {
        assert_eq!(row[..4], [op, "s3", "3", "4096"], "{table}");
        let rates: Vec<f64> = row[5..].iter().map(|v| v.parse().unwrap()).collect();
        assert!(rates.iter().all(|&rate| rate > 0.0), "{table}");
    }
    assert_eq!(served.ok("ls", &["listed/bench-"]), "");
}

#[test]
fn a_download_cut_short_fails_and_leaves_no_file() {
    let served = Served::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let file = path(dir.path(), "object");
    std::fs::write(&file, data(3 << 20)).unwrap();
    served.ok("mb", &["cut"]);
    served.ok("put", &[&file, "cut/k"]);
    // A byte flipped in the third block: the server sends two blocks, then ends the response.
    let stored = served.root.path().join("cut/k");
    let mut bytes = std::fs::read(&stored).unwrap();
    bytes[(2 << 20) + 5] ^= 1;
    std::fs::write(&stored, bytes).unwrap();
    let got = path(dir.path(), "got");
    let cut = served.run("get", &["cut/k", &got]);
    assert!(!cut.status.success(), "{}", String::from_utf8_lossy(&cut.stdout));
    assert!(!Path::new(&got).exists(), "a partial download was left");
}

/// A self-signed certificate for localhost and 127.0.0.1, and its key, in `dir`: their paths.
fn self_signed(dir: &Path) -> (String, String) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert, key) = (path(dir, "cert.pem"), path(dir, "key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

#[test]
fn https_serves_clients_that_trust_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let served = Served::start(&["--tls-cert", &cert, "--tls-key", &key]);
    assert!(served.endpoint.starts_with("https://"));
    let file = path(dir.path(), "object");
    let body = data(3 << 20);
    std::fs::write(&file, &body).unwrap();

    served.ok("mb", &["--ca-cert", &cert, "secure"]);
    served.ok("put", &["--ca-cert", &cert, &file, "secure/k"]);
    let got = path(dir.path(), "got");
    served.ok("get", &["--ca-cert", &cert, "secure/k", &got]);
    assert!(std::fs::read(&got).unwrap() == body);

    // Without the CA, the certificate is not trusted; plain HTTP gets no answer.
    let untrusted = served.run("ls", &[]);
    assert!(!untrusted.status.success());
    assert!(String::from_utf8_lossy(&untrusted.stderr).contains("certificate"));
    let plain = s3rdma(&["ls", "--endpoint", &format!("http://{}", served.addr)]).output().unwrap();
    assert!(!plain.status.success());
}

#[test]
fn a_stalled_tls_handshake_holds_no_other_connection_and_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let served = Served::start(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--max-connections",
        "2",
        "--header-timeout",
        "2",
    ]);
    // A connection that never sends its ClientHello.
    let mut stalled = TcpStream::connect(&served.addr).unwrap();
    stalled.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let start = Instant::now();
    served.ok("mb", &["--ca-cert", &cert, "meanwhile"]);
    assert!(start.elapsed() < Duration::from_secs(2), "waited for the stalled handshake");
    // The server gives up on it after the header timeout.
    let mut buf = [0; 16];
    let read = stalled.read(&mut buf);
    assert!(
        matches!(read, Ok(0)) || read.is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock)
    );
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(15),
        "{waited:?}"
    );
    // Both connections free again.
    for _ in 0..2 {
        served.ok("ls", &["--ca-cert", &cert]);
    }
}
