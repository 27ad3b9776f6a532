//! s3rdma on rxe0 with large objects, through the library's client: PUT and GET of 64 and
//! 192 MiB (GETs streamed through the server's ring, in ranges too) through one registered
//! buffer; parts of a multipart upload over RDMA, and the client's upload in parts; a byte
//! flipped on disk, which fails the GET over RDMA. Ports 19220–19229.
//!
//! Both sides hold up to 192 MiB at once (the guest has 2 GiB); the debug builds on the
//! guest's emulated CPU take minutes, hence a data phase deadline of their own.

use s3rdma::hipobj::client::ClientError;

use super::s3rdma::{data, prepare_of, rxe_device, Server, BUCKET};

/// The data phase's deadline of the large transfers.
const SLOW_EXEC: [&str; 2] = ["--rdma-exec-timeout-ms", "170000"];

/// `got` is `want`, else the first offset where they differ.
fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: the length");
    if got != want {
        let first = got.iter().zip(want).position(|(g, w)| g != w);
        panic!("{what}: differs from byte {first:?} on");
    }
}

/// 64 and 192 MiB PUT and GET over RDMA through one client, whose buffer is registered once
/// per size it grows to; GETs of the whole object and of a range not aligned to blocks.
#[test]
fn large_puts_and_gets_over_rdma_are_byte_for_byte_through_one_buffer() {
    let Some(server) = Server::on_rxe(19220, &SLOW_EXEC) else { return };
    let (client, device) = (server.client(1), rxe_device());
    for (seed, mib) in [(1, 64), (2, 192)] {
        let len = mib << 20;
        let key = format!("large-{mib}");
        let bytes = data(len, seed);
        let put = client.put(&device, BUCKET, &key, &bytes).unwrap();
        assert_eq!(put.bytes, len as u64);
        let buffer = client.buffer().unwrap();
        assert_eq!(buffer.1, len, "the buffer grew to the transfer");
        let (got, done) = client.get(&device, BUCKET, &key, 0, len).unwrap();
        assert_eq!(done.etag, put.etag);
        same_bytes(&got, &bytes, &key);
        drop(got);
        let (offset, size) = ((5 << 20) + 12_345, (8 << 20) + 7);
        let (got, _) = client.get(&device, BUCKET, &key, offset as u64, size).unwrap();
        same_bytes(&got, &bytes[offset..offset + size], &format!("{key} from {offset}"));
        assert_eq!(client.buffer(), Some(buffer), "{key}: the buffer was registered again");
    }
}

/// Parts of 5 MiB + 1, 6 MiB and 1 MiB PUT over RDMA, then completed over plain S3: the
/// object is their bytes, with a multipart ETag; a part's target is PUT only.
#[test]
fn parts_put_over_rdma_complete_a_multipart_upload() {
    let Some(server) = Server::on_rxe(19221, &SLOW_EXEC) else { return };
    let (client, device) = (server.client(1), rxe_device());
    let key = "dir/multi";
    let id = client.create_multipart_upload(BUCKET, key).unwrap();
    let sizes = [(5 << 20) + 1, 6 << 20, 1 << 20];
    let whole = data(sizes.iter().sum(), 3);
    let (mut etags, mut at) = (Vec::new(), 0);
    for (number, size) in (1..).zip(sizes) {
        let part = &whole[at..at + size];
        at += size;
        let done = client.put_part(&device, (BUCKET, key), &id, number, part).unwrap();
        assert_eq!(done.bytes, size as u64);
        etags.push(done.etag.expect("a part's ETag"));
    }
    let etag = client.complete_multipart_upload(BUCKET, key, &id, &etags).unwrap();
    assert!(etag.trim_matches('"').ends_with("-3"), "a multipart ETag: {etag}");
    same_bytes(&std::fs::read(server.stored(key)).unwrap(), &whole, "the stored object");
    let (got, _) = client.get(&device, BUCKET, key, 0, whole.len()).unwrap();
    same_bytes(&got, &whole, "the object over RDMA");
    // The client's upload in parts of 5 MiB: 5, 5 and 2 MiB + 1.
    let done = client.upload(&device, (BUCKET, "uploaded"), &whole, 5 << 20).unwrap();
    assert!(done.etag.unwrap().trim_matches('"').ends_with("-3"));
    same_bytes(&std::fs::read(server.stored("uploaded")).unwrap(), &whole, "uploaded");

    let part_target = format!("/{BUCKET}/k?uploadId={id}&partNumber=1");
    for (op, target) in [("GET", part_target.as_str()), ("PUT", "/bucket/k?uploadId=x")] {
        let reply = prepare_of(&client, "00000001", (op, target), 4096);
        assert_eq!(reply.status, 400, "{op} {target}: {}", reply.body);
    }
    let unknown =
        prepare_of(&client, "00000001", ("PUT", "/bucket/k?uploadId=x&partNumber=1"), 4096);
    assert_eq!(unknown.status, 404, "no such upload: {}", unknown.body);
    assert!(unknown.body.contains("NoSuchUpload"), "{}", unknown.body);
}

/// A byte flipped on disk in the middle of a 64 MiB object fails its GET over RDMA (502,
/// the client reports it), while a range before the flipped block is still served.
#[test]
fn a_byte_flipped_on_disk_fails_the_get_over_rdma() {
    let Some(server) = Server::on_rxe(19222, &SLOW_EXEC) else { return };
    let (client, device) = (server.client(1), rxe_device());
    let len = 64 << 20;
    let bytes = data(len, 4);
    client.put(&device, BUCKET, "flipped", &bytes).unwrap();
    let mut stored = bytes.clone();
    let flipped = (32 << 20) + 4321;
    stored[flipped] ^= 0x01;
    std::fs::write(server.stored("flipped"), &stored).unwrap();
    drop(stored);
    let error = client.get(&device, BUCKET, "flipped", 0, len).unwrap_err();
    match &error {
        ClientError::Refused { what: "READY", status: 502, body } => {
            assert!(body.contains("fail their checksum"), "{body}")
        }
        other => panic!("the GET of a corrupt object: {other}"),
    }
    // 8 MiB ending a byte before the flipped block.
    let (from, size) = ((24 << 20) - 1, 8 << 20);
    let (got, _) = client.get(&device, BUCKET, "flipped", from as u64, size).unwrap();
    same_bytes(&got, &bytes[from..from + size], "the blocks before the flipped one");
}
