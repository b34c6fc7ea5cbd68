//! Keys for the object store: from the AWS shared-credentials file format, so
//! that an `/etc/fstab` line can name a file instead of holding secrets.

use crate::error::{Error, Result};
use std::path::Path;

/// An access key, its secret and an optional session token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `aws_access_key_id`.
    pub access_key_id: String,
    /// `aws_secret_access_key`.
    pub secret_access_key: String,
    /// `aws_session_token`, for temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        f.write_str("Credentials(<redacted>)")
    }
}

impl Credentials {
    /// Reads `profile` (`AWS_PROFILE`, else `default`, when `None`) from a
    /// shared-credentials file: `[profile]` sections of `key = value` lines.
    pub fn from_file(path: &Path, profile: Option<&str>) -> Result<Credentials> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("s3_credentials={}: {e}", path.display())))?;
        let env_profile = std::env::var("AWS_PROFILE").ok();
        let want = profile
            .or(env_profile.as_deref())
            .unwrap_or("default")
            .to_string();
        Self::parse(&text, &want)
            .map_err(|why| Error::Config(format!("s3_credentials={}: {why}", path.display())))
    }

    fn parse(text: &str, want: &str) -> std::result::Result<Credentials, String> {
        let (mut section, mut found) = (String::new(), false);
        let (mut id, mut secret, mut token) = (None, None, None);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.trim().trim_start_matches("profile ").to_string();
                found |= section == want;
                continue;
            }
            if section != want {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim().to_string();
            match k.trim() {
                "aws_access_key_id" => id = Some(v),
                "aws_secret_access_key" => secret = Some(v),
                "aws_session_token" => token = Some(v),
                _ => {}
            }
        }
        if !found {
            return Err(format!("no [{want}] profile"));
        }
        match (id, secret) {
            (Some(access_key_id), Some(secret_access_key)) => Ok(Credentials {
                access_key_id,
                secret_access_key,
                session_token: token,
            }),
            _ => Err(format!(
                "profile [{want}] needs aws_access_key_id and aws_secret_access_key"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# keys\n[default]\naws_access_key_id = AK1\naws_secret_access_key=S1\n\n\
                        [profile other]\naws_access_key_id=AK2\naws_secret_access_key = S2\n\
                        aws_session_token = T2\n";

    #[test]
    fn reads_the_profile_asked_for() {
        let d = Credentials::parse(FILE, "default").unwrap();
        assert_eq!(
            (d.access_key_id.as_str(), d.secret_access_key.as_str()),
            ("AK1", "S1")
        );
        assert_eq!(d.session_token, None);
        let o = Credentials::parse(FILE, "other").unwrap();
        assert_eq!(o.session_token.as_deref(), Some("T2"));
    }

    #[test]
    fn says_what_is_missing() {
        assert!(Credentials::parse(FILE, "absent")
            .unwrap_err()
            .contains("no [absent]"));
        let half = "[default]\naws_access_key_id=AK\n";
        assert!(Credentials::parse(half, "default")
            .unwrap_err()
            .contains("needs"));
    }
}
