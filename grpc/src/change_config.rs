//! A table's `change_stream_config` (its change log's retention,
//! docs/changes.md) as the API gives and shows it.

use crate::admin_v2 as a;
use tonic::Status;

/// The retention in µs that `c` asks for; no config or a zero period
/// turns the log off. The engine refuses more than 7 days.
pub(crate) fn retention_of(c: Option<&a::ChangeStreamConfig>) -> Result<u64, Status> {
    match c.and_then(|c| c.retention_period.as_ref()) {
        None => Ok(0),
        Some(d) if d.seconds == 0 && d.nanos == 0 => Ok(0),
        Some(d) => crate::gc::duration_micros(d),
    }
}

/// The config shown for a retention (none while the log is off).
pub(crate) fn to_api(retention: u64) -> Option<a::ChangeStreamConfig> {
    (retention > 0).then(|| a::ChangeStreamConfig {
        retention_period: Some(crate::gc::duration_of(retention)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_roundtrips_and_zero_is_off() {
        let c = to_api(86_400_000_000).unwrap();
        assert_eq!(retention_of(Some(&c)).unwrap(), 86_400_000_000);
        assert_eq!(retention_of(None).unwrap(), 0);
        assert!(to_api(0).is_none());
        let neg = a::ChangeStreamConfig {
            retention_period: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
        };
        assert!(retention_of(Some(&neg)).is_err());
    }
}
