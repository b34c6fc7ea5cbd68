//! Garbage-collection rules: the API's `GcRule` tree and the engine's map
//! onto each other node for node (the engine checks depth and size).

use crate::admin_v2::{gc_rule, GcRule as ApiRule};
use engine::schema::GcRule;
use tonic::Status;

/// A positive API duration in µs (a max_age, a change retention).
pub(crate) fn duration_micros(d: &prost_types::Duration) -> Result<u64, Status> {
    if d.seconds < 0 || d.nanos < 0 || (d.seconds == 0 && d.nanos == 0) {
        return Err(Status::invalid_argument(
            "a duration (max_age, retention) must be positive",
        ));
    }
    Ok((d.seconds as u64)
        .saturating_mul(1_000_000)
        .saturating_add(d.nanos as u64 / 1000)
        .max(1))
}

fn convert(r: &ApiRule) -> Result<GcRule, Status> {
    let all = |rs: &[ApiRule]| rs.iter().map(convert).collect::<Result<Vec<_>, _>>();
    Ok(match &r.rule {
        Some(gc_rule::Rule::MaxNumVersions(n)) => {
            if *n < 1 {
                return Err(Status::invalid_argument(
                    "max_num_versions must be at least 1",
                ));
            }
            GcRule::MaxVersions(*n as u32)
        }
        Some(gc_rule::Rule::MaxAge(d)) => GcRule::MaxAge(duration_micros(d)?),
        Some(gc_rule::Rule::Union(u)) => GcRule::Union(all(&u.rules)?),
        Some(gc_rule::Rule::Intersection(i)) => {
            if i.rules.is_empty() {
                // An empty intersection collects nothing.
                GcRule::KEEP_ALL
            } else {
                GcRule::Intersection(all(&i.rules)?)
            }
        }
        None => sent_empty(),
    })
}

/// A `gc_rule {}` as a client sent it: it keeps everything, like no rule,
/// but is echoed back as `{}` (cbt shows "" for it and `<never>` for no
/// rule). Stored as an intersection of keep-everything, which collects
/// nothing and reads back in every format as it was written.
fn sent_empty() -> GcRule {
    GcRule::Intersection(vec![GcRule::KEEP_ALL])
}

/// The engine rule for an API rule (none: keep everything, as the API does).
pub fn from_api(r: Option<&ApiRule>) -> Result<GcRule, Status> {
    let rule = r.map_or(Ok(GcRule::KEEP_ALL), convert)?;
    rule.validate().map_err(crate::status::from_engine)?;
    Ok(rule)
}

/// µs as an API duration.
pub(crate) fn duration_of(us: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: (us / 1_000_000) as i64,
        nanos: ((us % 1_000_000) * 1000) as i32,
    }
}

/// The API rule for an engine rule (keep-everything: no rule).
pub fn to_api(r: &GcRule) -> Option<ApiRule> {
    if *r == GcRule::KEEP_ALL {
        return None;
    }
    if *r == sent_empty() {
        return Some(ApiRule { rule: None });
    }
    Some(ApiRule {
        rule: Some(match r {
            GcRule::MaxVersions(n) => gc_rule::Rule::MaxNumVersions(*n as i32),
            GcRule::MaxAge(us) => gc_rule::Rule::MaxAge(duration_of(*us)),
            GcRule::Union(rs) => gc_rule::Rule::Union(gc_rule::Union {
                rules: rs.iter().filter_map(to_api_node).collect(),
            }),
            GcRule::Intersection(rs) => gc_rule::Rule::Intersection(gc_rule::Intersection {
                rules: rs.iter().filter_map(to_api_node).collect(),
            }),
        }),
    })
}

/// A member of a union or intersection: keep-everything stays an empty union.
fn to_api_node(r: &GcRule) -> Option<ApiRule> {
    to_api(r).or(Some(ApiRule {
        rule: Some(gc_rule::Rule::Union(gc_rule::Union { rules: Vec::new() })),
    }))
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
        assert_eq!(to_api(&GcRule::KEEP_ALL), None);
        let one = from_api(Some(&versions(2))).unwrap();
        assert_eq!(one, GcRule::MaxVersions(2));
        assert_eq!(to_api(&one), Some(versions(2)));
        let nested = ApiRule {
            rule: Some(gc_rule::Rule::Intersection(gc_rule::Intersection {
                rules: vec![
                    age(60),
                    ApiRule {
                        rule: Some(gc_rule::Rule::Union(gc_rule::Union {
                            rules: vec![versions(3), versions(1)],
                        })),
                    },
                ],
            })),
        };
        let e = from_api(Some(&nested)).unwrap();
        assert_eq!(
            e,
            GcRule::Intersection(vec![
                GcRule::MaxAge(60_000_000),
                GcRule::Union(vec![GcRule::MaxVersions(3), GcRule::MaxVersions(1)])
            ])
        );
        assert_eq!(to_api(&e), Some(nested));
        assert!(from_api(Some(&versions(0))).is_err());
        // `gc_rule {}` keeps everything and comes back as sent.
        let empty = from_api(Some(&ApiRule { rule: None })).unwrap();
        assert!(!empty.collects(1_000, 0, u64::MAX));
        assert_eq!(to_api(&empty), Some(ApiRule { rule: None }));
        // As the lock service's .schema text stores it, and back.
        assert_eq!(GcRule::parse_text(&empty.to_text()), Ok(empty));
    }
}
