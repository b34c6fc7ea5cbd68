//! Reading an option's value (`64k`, `0.5`, `HOST:PORT`…) and writing it
//! back for `.bigtable/mount`.

use std::path::PathBuf;
use std::time::Duration;

/// One option as given: `key=value`, or a bare `key`.
#[derive(Debug, Clone, Copy)]
pub struct Given<'a> {
    pub key: &'a str,
    pub value: Option<&'a str>,
}

impl<'a> Given<'a> {
    /// Splits `key=value`.
    pub fn split(opt: &'a str) -> Given<'a> {
        match opt.split_once('=') {
            Some((key, v)) => Given {
                key,
                value: Some(v),
            },
            None => Given {
                key: opt,
                value: None,
            },
        }
    }

    /// The value, which the option must have.
    pub fn need(&self) -> Result<&'a str, String> {
        let key = self.key;
        self.value
            .ok_or_else(|| format!("option {key} needs a value ({key}=...)"))
    }

    /// A whole number in `min..=max` (`unit` names what it counts).
    pub fn whole(&self, min: u64, max: u64, unit: &str) -> Result<u64, String> {
        let (key, v) = (self.key, self.need()?);
        match v.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(format!(
                "{key}={v}: must be {min}..{max}{unit}, a whole number"
            )),
        }
    }

    /// A number whose parse error is `"{key}: not a number"`.
    pub fn number<T: std::str::FromStr>(&self) -> Result<T, String> {
        self.need()?
            .parse()
            .map_err(|_| format!("{}: not a number", self.key))
    }

    pub fn path(&self) -> Result<PathBuf, String> {
        Ok(PathBuf::from(self.need()?))
    }

    pub fn size(&self) -> Result<u64, String> {
        parse_size(self.need()?)
    }

    pub fn seconds(&self) -> Result<Duration, String> {
        parse_seconds(self.need()?)
    }

    pub fn rate(&self) -> Result<u64, String> {
        parse_rate(self.need()?)
    }

    /// `PORT` (loopback) or `HOST:PORT`.
    pub fn addr(&self) -> Result<std::net::SocketAddr, String> {
        grpc::parse_addr(self.need()?).map_err(|e| e.to_string())
    }

    /// Directories separated by `:` (empty ones dropped).
    pub fn dirs(&self) -> Result<Vec<PathBuf>, String> {
        Ok(self
            .need()?
            .split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect())
    }
}

/// `64k`, `16M`, `2g`, or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_lowercase() {
                'k' => 1 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1 << 40,
                _ => return Err(format!("size {s:?}: unknown unit {c:?}")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("size {s:?} is not a number with an optional k/m/g/t unit"))
}

/// A size per second: `4m`, `4m/s`, or plain bytes.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    parse_size(s.trim().strip_suffix("/s").unwrap_or(s))
}

/// Seconds, possibly fractional.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.0..=86400.0).contains(&v) {
        return Err(format!("{s} seconds is out of range"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// A size as `parse_size` reads it, in the largest unit that divides it.
pub fn size(n: u64) -> Option<String> {
    let unit = [(40, 't'), (30, 'g'), (20, 'm'), (10, 'k')]
        .into_iter()
        .find(|(shift, _)| n != 0 && n.is_multiple_of(1u64 << shift));
    Some(match unit {
        Some((shift, u)) => format!("{}{u}", n >> shift),
        None => n.to_string(),
    })
}

/// Seconds as `parse_seconds` reads them.
pub fn secs(d: Duration) -> Option<String> {
    Some(d.as_secs_f64().to_string())
}

/// Whole microseconds.
pub fn micros(d: Duration) -> Option<String> {
    Some(d.as_micros().to_string())
}

pub fn num(n: impl ToString) -> Option<String> {
    Some(n.to_string())
}

pub fn flag(on: bool) -> Option<String> {
    Some(on.to_string())
}

/// A file's path, never its contents (some hold secrets).
pub fn path(p: &Option<PathBuf>) -> Option<String> {
    p.as_deref().map(|p| p.display().to_string())
}

/// Directories as `dirs` reads them (None if there are none).
pub fn dirs(d: &[PathBuf]) -> Option<String> {
    let parts: Vec<String> = d.iter().map(|p| p.display().to_string()).collect();
    (!parts.is_empty()).then(|| parts.join(":"))
}
