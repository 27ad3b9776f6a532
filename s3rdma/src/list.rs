//! ListObjectsV2 over a bucket's directory tree: a walk in key order that skips what cannot
//! match (directories outside the prefix, before the start, or rolled up into a common prefix).

use std::path::Path;

use crate::layout::TEMP_PREFIX;

/// What a listing asks for.
pub struct ListQuery<'a> {
    /// Only keys starting with this.
    pub prefix: &'a str,
    /// Keys whose rest after the prefix contains this are rolled up into common prefixes.
    pub delimiter: Option<&'a str>,
    /// Only keys (and common prefixes) after these bytes.
    pub after: Vec<u8>,
    /// At most this many keys and common prefixes together.
    pub max: usize,
}

/// One entry of a listing.
#[derive(Debug, PartialEq, Eq)]
pub enum Listed {
    /// An object's key.
    Key(String),
    /// A common prefix (ends with the delimiter).
    Prefix(String),
}

/// A listing's page: the entries in key order, and whether more follow.
pub struct Page {
    /// The entries, at most `max`.
    pub entries: Vec<Listed>,
    /// More entries follow the last one.
    pub truncated: bool,
}

impl Listed {
    /// Where the next page starts: after this key, or after every key under this prefix
    /// (0xFF, which no UTF-8 string contains, sorts after all of them).
    pub fn resume_after(&self) -> Vec<u8> {
        match self {
            Listed::Key(key) => key.as_bytes().to_vec(),
            Listed::Prefix(prefix) => [prefix.as_bytes(), &[0xFF]].concat(),
        }
    }
}

/// Lists the bucket whose directory is `dir`; `is_object(key)` says whether a file is an
/// object (it has metadata).
pub fn list(
    dir: &Path,
    query: &ListQuery<'_>,
    is_object: &dyn Fn(&str) -> bool,
) -> std::io::Result<Page> {
    let mut walk = Walk { query, is_object, entries: Vec::new() };
    if query.max > 0 {
        walk.dir(dir, "")?;
    }
    let truncated = walk.entries.len() > query.max;
    walk.entries.truncate(query.max);
    Ok(Page { entries: walk.entries, truncated })
}

struct Walk<'q> {
    query: &'q ListQuery<'q>,
    is_object: &'q dyn Fn(&str) -> bool,
    entries: Vec<Listed>,
}

impl Walk<'_> {
    /// One more than `max` entries ends the walk: the last says the page is truncated.
    fn full(&self) -> bool {
        self.entries.len() > self.query.max
    }

    /// The common prefix `key` rolls up into, if any.
    fn common_prefix<'k>(&self, key: &'k str) -> Option<&'k str> {
        let delimiter = self.query.delimiter.filter(|d| !d.is_empty())?;
        let rest = key.strip_prefix(self.query.prefix)?;
        rest.find(delimiter).map(|at| &key[..self.query.prefix.len() + at + delimiter.len()])
    }

    fn push_prefix(&mut self, prefix: &str) {
        if self.entries.last() != Some(&Listed::Prefix(prefix.to_owned())) {
            self.entries.push(Listed::Prefix(prefix.to_owned()));
        }
    }

    fn dir(&mut self, dir: &Path, key_prefix: &str) -> std::io::Result<()> {
        let mut children = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            if name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let is_dir = entry.file_type()?.is_dir();
            // A directory sorts as its keys do: by its name followed by `/`.
            let key = format!("{key_prefix}{name}{}", if is_dir { "/" } else { "" });
            children.push((key, is_dir));
        }
        children.sort_unstable();
        let (prefix, after) = (self.query.prefix, self.query.after.as_slice());
        for (key, is_dir) in children {
            if self.full() {
                break;
            }
            if is_dir {
                let overlaps = key.starts_with(prefix) || prefix.starts_with(key.as_str());
                // Every key under `key` is before `after` when `key` is and is not a prefix of it.
                let before = key.as_bytes() < after && !after.starts_with(key.as_bytes());
                if !overlaps || before {
                    continue;
                }
                match self.common_prefix(&key) {
                    Some(common) if common.as_bytes() > after => {
                        let common = common.to_owned();
                        self.push_prefix(&common);
                    }
                    _ => self.dir(&dir.join(&key[key_prefix.len()..key.len() - 1]), &key)?,
                }
            } else if key.starts_with(prefix) && key.as_bytes() > after && (self.is_object)(&key) {
                match self.common_prefix(&key) {
                    Some(common) => {
                        let common = common.to_owned();
                        self.push_prefix(&common);
                    }
                    None => self.entries.push(Listed::Key(key)),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(
        dir: &Path,
        prefix: &str,
        delimiter: Option<&str>,
        after: &[u8],
        max: usize,
    ) -> (Vec<Listed>, bool) {
        let query = ListQuery { prefix, delimiter, after: after.to_vec(), max };
        let page = list(dir, &query, &|_| true).unwrap();
        (page.entries, page.truncated)
    }

    #[test]
    fn keys_come_in_byte_order_with_prefixes_rolled_up_and_pages_resumed() {
        let root = tempfile::tempdir().unwrap();
        for key in ["a-c", "a/b", "a/c/d", "b", "c/x", "c/y", ".s3rdma-tmp-1"] {
            let path = root.path().join(key);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"").unwrap();
        }
        let key = |k: &str| Listed::Key(k.into());
        let pre = |p: &str| Listed::Prefix(p.into());
        // `-` (0x2d) sorts before `/` (0x2f): "a-c" before "a/b".
        assert_eq!(
            page(root.path(), "", None, b"", 10).0,
            [key("a-c"), key("a/b"), key("a/c/d"), key("b"), key("c/x"), key("c/y")]
        );
        assert_eq!(
            page(root.path(), "", Some("/"), b"", 10).0,
            [key("a-c"), pre("a/"), key("b"), pre("c/")]
        );
        assert_eq!(page(root.path(), "a/", Some("/"), b"", 10).0, [key("a/b"), pre("a/c/")]);
        assert_eq!(
            page(root.path(), "a", Some("-"), b"", 10).0,
            [pre("a-"), key("a/b"), key("a/c/d")]
        );
        // Pages of two, each resumed after the last entry of the one before.
        let (mut after, mut all) = (Vec::new(), Vec::new());
        loop {
            let (entries, truncated) = page(root.path(), "", Some("/"), &after, 2);
            after = entries.last().unwrap().resume_after();
            all.extend(entries);
            if !truncated {
                break;
            }
        }
        assert_eq!(all, [key("a-c"), pre("a/"), key("b"), pre("c/")]);
        // Starting after a key inside a common prefix still reports the prefix once.
        assert_eq!(
            page(root.path(), "", Some("/"), b"a/b", 10).0,
            [pre("a/"), key("b"), pre("c/")]
        );
        assert_eq!(page(root.path(), "", None, b"", 0), (vec![], false));
    }
}
