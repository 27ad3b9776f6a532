//! The access keys and secrets requests are signed with (AWS Signature Version 4).

use std::path::Path;

use serde::Deserialize;

/// The environment variables read when no credentials file is given.
pub const ENV_ACCESS_KEY: &str = "S3RDMA_ACCESS_KEY_ID";
/// See [`ENV_ACCESS_KEY`].
pub const ENV_SECRET_KEY: &str = "S3RDMA_SECRET_ACCESS_KEY";

/// An access key and its secret.
#[derive(Clone, Deserialize)]
pub struct Credentials {
    /// The access key id clients name in their signatures.
    pub access_key_id: String,
    /// The secret they sign with.
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// One key, or a list of them, in a credentials file.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(Credentials),
    Many(Vec<Credentials>),
}

const SHAPE: &str =
    "expected {\"access_key_id\": \"...\", \"secret_access_key\": \"...\"} or a list of such";

impl Credentials {
    /// Reads `file` (JSON: `{"access_key_id": "...", "secret_access_key": "..."}`, or a list
    /// of such for several keys), or without one the environment variables
    /// [`ENV_ACCESS_KEY`] and [`ENV_SECRET_KEY`]. The error says what is missing.
    pub fn load(file: Option<&Path>) -> Result<Vec<Self>, String> {
        let keys = match file {
            Some(file) => {
                let bytes = std::fs::read(file)
                    .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
                match serde_json::from_slice::<OneOrMany>(&bytes) {
                    Ok(OneOrMany::One(key)) => vec![key],
                    Ok(OneOrMany::Many(keys)) => keys,
                    // The error of the one-key shape names the field that is missing.
                    Err(_) => {
                        let e = serde_json::from_slice::<Self>(&bytes).err();
                        return Err(format!(
                            "{}: {}; {SHAPE}",
                            file.display(),
                            e.map_or_else(
                                || "not a key or a list of keys".into(),
                                |e| e.to_string()
                            )
                        ));
                    }
                }
            }
            None => match (std::env::var(ENV_ACCESS_KEY), std::env::var(ENV_SECRET_KEY)) {
                (Ok(access_key_id), Ok(secret_access_key)) => {
                    vec![Self { access_key_id, secret_access_key }]
                }
                _ => {
                    return Err(format!(
                        "no credentials: give --credentials FILE (JSON with access_key_id and \
                         secret_access_key) or set {ENV_ACCESS_KEY} and {ENV_SECRET_KEY}"
                    ))
                }
            },
        };
        if keys.is_empty() {
            return Err(format!("the list of keys is empty; {SHAPE}"));
        }
        for key in &keys {
            if key.access_key_id.trim().is_empty() || key.secret_access_key.trim().is_empty() {
                return Err("the access key id and the secret must not be empty".into());
            }
            if keys.iter().filter(|k| k.access_key_id == key.access_key_id).count() > 1 {
                return Err(format!("access key {} is listed twice", key.access_key_id));
            }
        }
        Ok(keys)
    }
}
