//! A column family's `value_type`: the API's `Type` and the engine's
//! aggregate families map onto each other. Served: `Aggregate` over an
//! `Int64` input (big-endian encoding) with `Sum`, `Min` or `Max`; refused
//! with INVALID_ARGUMENT: HyperLogLog++ unique counts, the ordered-code
//! encoding, and every non-aggregate type.

use crate::admin_v2::r#type::{aggregate, int64, Aggregate, Int64, Kind};
use crate::admin_v2::Type;
use engine::schema::Aggregator;
use tonic::Status;

fn invalid(what: &str) -> Status {
    Status::invalid_argument(format!(
        "column family value_type: {what}; served are Aggregate types over Int64 \
         (big-endian) with Sum, Min or Max"
    ))
}

/// The aggregator a family's `value_type` asks for (`None`: a plain family).
pub fn from_api(t: Option<&Type>) -> Result<Option<Aggregator>, Status> {
    let Some(kind) = t.and_then(|t| t.kind.as_ref()) else {
        return Ok(None);
    };
    let Kind::AggregateType(agg) = kind else {
        return Err(invalid("only Aggregate types are supported"));
    };
    match agg.input_type.as_deref().and_then(|t| t.kind.as_ref()) {
        Some(Kind::Int64Type(i)) => match i.encoding.as_ref().and_then(|e| e.encoding) {
            None | Some(int64::encoding::Encoding::BigEndianBytes(_)) => {}
            Some(int64::encoding::Encoding::OrderedCodeBytes(_)) => {
                return Err(invalid("the Int64 ordered-code encoding is not supported"))
            }
        },
        None => return Err(invalid("an Aggregate type needs an input_type")),
        Some(_) => return Err(invalid("only Int64 aggregate inputs are supported")),
    }
    match agg.aggregator {
        Some(aggregate::Aggregator::Sum(_)) => Ok(Some(Aggregator::Sum)),
        Some(aggregate::Aggregator::Min(_)) => Ok(Some(Aggregator::Min)),
        Some(aggregate::Aggregator::Max(_)) => Ok(Some(Aggregator::Max)),
        Some(aggregate::Aggregator::HllppUniqueCount(_)) => {
            Err(invalid("HyperLogLog++ unique counts are not supported"))
        }
        None => Err(invalid("an Aggregate type needs an aggregator")),
    }
}

/// A family's `value_type` as GetTable reports it (input and state Int64).
pub fn to_api(a: Option<Aggregator>) -> Option<Type> {
    let a = a?;
    let int64 = || {
        Some(Box::new(Type {
            kind: Some(Kind::Int64Type(Int64 {
                encoding: Some(int64::Encoding {
                    encoding: Some(int64::encoding::Encoding::BigEndianBytes(
                        #[allow(deprecated)]
                        int64::encoding::BigEndianBytes { bytes_type: None },
                    )),
                }),
            })),
        }))
    };
    let aggregator = match a {
        Aggregator::Sum => aggregate::Aggregator::Sum(aggregate::Sum {}),
        Aggregator::Min => aggregate::Aggregator::Min(aggregate::Min {}),
        Aggregator::Max => aggregate::Aggregator::Max(aggregate::Max {}),
    };
    Some(Type {
        kind: Some(Kind::AggregateType(Box::new(Aggregate {
            input_type: int64(),
            state_type: int64(),
            aggregator: Some(aggregator),
        }))),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::admin_v2::r#type::Bytes;
    use tonic::Code;

    #[test]
    fn round_trips_and_refusals() {
        assert_eq!(from_api(None).unwrap(), None);
        assert_eq!(from_api(Some(&Type { kind: None })).unwrap(), None);
        for a in Aggregator::ALL {
            assert_eq!(from_api(to_api(Some(a)).as_ref()).unwrap(), Some(a));
        }
        assert_eq!(to_api(None), None);
        let with = |f: &dyn Fn(&mut Aggregate)| {
            let mut t = to_api(Some(Aggregator::Sum)).unwrap();
            if let Some(Kind::AggregateType(a)) = &mut t.kind {
                f(a);
            }
            from_api(Some(&t))
        };
        // No encoding given: big-endian, as the API defaults.
        let plain_int = Some(Box::new(Type {
            kind: Some(Kind::Int64Type(Int64 { encoding: None })),
        }));
        assert_eq!(
            with(&|a| a.input_type = plain_int.clone()).unwrap(),
            Some(Aggregator::Sum)
        );
        let hll = with(&|a| {
            a.aggregator = Some(aggregate::Aggregator::HllppUniqueCount(
                aggregate::HyperLogLogPlusPlusUniqueCount {},
            ))
        })
        .unwrap_err();
        assert_eq!(hll.code(), Code::InvalidArgument);
        assert!(hll.message().contains("HyperLogLog"), "{}", hll.message());
        for bad in [
            with(&|a| a.aggregator = None),
            with(&|a| a.input_type = None),
            with(&|a| {
                a.input_type = Some(Box::new(Type {
                    kind: Some(Kind::BytesType(Bytes { encoding: None })),
                }))
            }),
            with(&|a| {
                a.input_type = Some(Box::new(Type {
                    kind: Some(Kind::Int64Type(Int64 {
                        encoding: Some(int64::Encoding {
                            encoding: Some(int64::encoding::Encoding::OrderedCodeBytes(
                                int64::encoding::OrderedCodeBytes {},
                            )),
                        }),
                    })),
                }))
            }),
            from_api(Some(&Type {
                kind: Some(Kind::BytesType(Bytes { encoding: None })),
            })),
        ] {
            assert_eq!(bad.unwrap_err().code(), Code::InvalidArgument);
        }
    }
}
