//! Garbage-collection rules between the API's rule trees and the engine's
//! rule (a version limit and an age limit combined by union or intersection).
//! Trees deeper than that are refused with INVALID_ARGUMENT.

use crate::admin_v2::{gc_rule, GcRule as ApiRule};
use engine::schema::{GcMode, GcRule};
use tonic::Status;

fn unsupported(what: &str) -> Status {
    Status::invalid_argument(format!(
        "unsupported GC rule: {what} (supported: max_num_versions, max_age, and one union or intersection of one of each)"
    ))
}

fn duration_micros(d: &prost_types::Duration) -> Result<u64, Status> {
    if d.seconds < 0 || d.nanos < 0 || (d.seconds == 0 && d.nanos == 0) {
        return Err(Status::invalid_argument("max_age must be positive"));
    }
    Ok((d.seconds as u64)
        .saturating_mul(1_000_000)
        .saturating_add(d.nanos as u64 / 1000)
        .max(1))
}

/// One leaf into `rule`; refuses a second limit of the same kind.
fn leaf(rule: &mut GcRule, r: &ApiRule) -> Result<(), Status> {
    match &r.rule {
        Some(gc_rule::Rule::MaxNumVersions(n)) => {
            if *n < 1 {
                return Err(Status::invalid_argument(
                    "max_num_versions must be at least 1",
                ));
            }
            if rule.max_versions.replace(*n as u32).is_some() {
                return Err(unsupported("two version limits"));
            }
        }
        Some(gc_rule::Rule::MaxAge(d)) => {
            let age = duration_micros(d)?;
            if rule.max_age_micros.replace(age).is_some() {
                return Err(unsupported("two age limits"));
            }
        }
        Some(_) => return Err(unsupported("nested union or intersection")),
        None => {}
    }
    Ok(())
}

/// The engine rule for an API rule (none: keep everything, as the API does).
pub fn from_api(r: Option<&ApiRule>) -> Result<GcRule, Status> {
    let mut rule = GcRule::KEEP_ALL;
    let Some(r) = r else {
        return Ok(rule);
    };
    match &r.rule {
        Some(gc_rule::Rule::Union(u)) => {
            rule.mode = GcMode::Union;
            for x in &u.rules {
                leaf(&mut rule, x)?;
            }
        }
        Some(gc_rule::Rule::Intersection(i)) => {
            rule.mode = GcMode::Intersection;
            if i.rules.is_empty() {
                // An empty intersection collects nothing.
                return Ok(GcRule::KEEP_ALL);
            }
            for x in &i.rules {
                leaf(&mut rule, x)?;
            }
        }
        _ => leaf(&mut rule, r)?,
    }
    Ok(rule)
}

/// The API rule for an engine rule.
pub fn to_api(r: &GcRule) -> Option<ApiRule> {
    let mut leaves = Vec::new();
    if let Some(n) = r.max_versions {
        leaves.push(ApiRule {
            rule: Some(gc_rule::Rule::MaxNumVersions(n as i32)),
        });
    }
    if let Some(us) = r.max_age_micros {
        leaves.push(ApiRule {
            rule: Some(gc_rule::Rule::MaxAge(prost_types::Duration {
                seconds: (us / 1_000_000) as i64,
                nanos: ((us % 1_000_000) * 1000) as i32,
            })),
        });
    }
    match leaves.len() {
        0 => None,
        1 => leaves.pop(),
        _ => Some(ApiRule {
            rule: Some(match r.mode {
                GcMode::Union => gc_rule::Rule::Union(gc_rule::Union { rules: leaves }),
                GcMode::Intersection => {
                    gc_rule::Rule::Intersection(gc_rule::Intersection { rules: leaves })
                }
            }),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn versions(n: i32) -> ApiRule {
        ApiRule {
            rule: Some(gc_rule::Rule::MaxNumVersions(n)),
        }
    }
    fn age(s: i64) -> ApiRule {
        ApiRule {
            rule: Some(gc_rule::Rule::MaxAge(prost_types::Duration {
                seconds: s,
                nanos: 0,
            })),
        }
    }

    #[test]
    fn round_trips() {
        assert_eq!(from_api(None).unwrap(), GcRule::KEEP_ALL);
        let one = from_api(Some(&versions(2))).unwrap();
        assert_eq!(one.max_versions, Some(2));
        assert_eq!(to_api(&one), Some(versions(2)));
        let u = ApiRule {
            rule: Some(gc_rule::Rule::Union(gc_rule::Union {
                rules: vec![versions(3), age(60)],
            })),
        };
        let e = from_api(Some(&u)).unwrap();
        assert_eq!(e.max_age_micros, Some(60_000_000));
        assert_eq!(to_api(&e), Some(u));
        assert!(from_api(Some(&versions(0))).is_err());
        let nested = ApiRule {
            rule: Some(gc_rule::Rule::Union(gc_rule::Union {
                rules: vec![versions(1), versions(2)],
            })),
        };
        assert!(from_api(Some(&nested)).is_err());
    }
}
