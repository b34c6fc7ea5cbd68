//! The API's `RowFilter` as the engine's [`engine::RowFilter`], which maps
//! onto it case for case and runs in the tablet server (scans) or under the
//! row lock (check-and-mutate). Only the wire details are handled here:
//! empty messages, `true` flags, negative counts, the open timestamp end.

use crate::v2;
use engine::filter::Labeled;
use engine::schema::TableSchema;
use engine::{RowFilter, TimeRange};
use std::cmp::Ordering;
use std::ops::Bound;
use tonic::Status;
use v2::row_filter::Filter as F;

/// A cell as a ReadRows response carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FCell {
    pub family: String,
    pub qualifier: Vec<u8>,
    pub timestamp: u64,
    pub value: Vec<u8>,
    pub labels: Vec<String>,
}

impl FCell {
    /// Row order of cells: family (in the order `schema` made them),
    /// qualifier, newest first.
    pub fn order(schema: &TableSchema, a: &FCell, b: &FCell) -> Ordering {
        let family = || {
            (schema.family_rank(&a.family), &a.family)
                .cmp(&(schema.family_rank(&b.family), &b.family))
        };
        // Ranks are looked up only between families.
        let same = a.family == b.family;
        (if same { Ordering::Equal } else { family() })
            .then_with(|| a.qualifier.cmp(&b.qualifier))
            .then_with(|| b.timestamp.cmp(&a.timestamp))
    }
}

impl From<engine::Cell> for FCell {
    fn from(c: engine::Cell) -> FCell {
        FCell {
            family: c.family,
            qualifier: c.qualifier,
            timestamp: c.timestamp,
            value: c.value.into_vec(),
            labels: Vec::new(),
        }
    }
}

impl From<Labeled> for FCell {
    fn from(l: Labeled) -> FCell {
        FCell {
            labels: l.labels,
            ..FCell::from(l.cell)
        }
    }
}

fn bad(what: impl Into<String>) -> Status {
    Status::invalid_argument(what.into())
}

fn count(what: &str, n: i32) -> Result<u32, Status> {
    u32::try_from(n).map_err(|_| bad(format!("{what} must not be negative")))
}

fn flag(what: &str, on: bool) -> Result<(), Status> {
    if on {
        Ok(())
    } else {
        Err(bad(format!("{what} must be true")))
    }
}

/// A request's filter; none (or an empty message) passes everything.
pub fn from_api(f: Option<&v2::RowFilter>) -> Result<Option<RowFilter>, Status> {
    let f = match f {
        Some(f) if f.filter.is_some() => convert(f)?,
        _ => return Ok(None),
    };
    // Compiled once here so a bad regex fails the call before it streams.
    f.compile().map_err(crate::status::from_engine)?;
    Ok(Some(f))
}

fn convert_opt(f: Option<&v2::RowFilter>) -> Result<Option<Box<RowFilter>>, Status> {
    f.map(|f| convert(f).map(Box::new)).transpose()
}

fn convert(f: &v2::RowFilter) -> Result<RowFilter, Status> {
    use v2::column_range::{EndQualifier as EQ, StartQualifier as SQ};
    use v2::value_range::{EndValue as EV, StartValue as SV};
    let Some(filter) = &f.filter else {
        return Ok(RowFilter::PassAll);
    };
    let all = |fs: &[v2::RowFilter]| fs.iter().map(convert).collect::<Result<Vec<_>, _>>();
    Ok(match filter {
        F::Chain(c) => RowFilter::Chain(all(&c.filters)?),
        F::Interleave(i) => RowFilter::Interleave(all(&i.filters)?),
        F::Condition(c) => RowFilter::Condition {
            predicate: Box::new(match c.predicate_filter.as_deref() {
                Some(p) => convert(p)?,
                None => RowFilter::PassAll,
            }),
            true_filter: convert_opt(c.true_filter.as_deref())?,
            false_filter: convert_opt(c.false_filter.as_deref())?,
        },
        F::Sink(on) => {
            flag("sink", *on)?;
            RowFilter::Sink
        }
        F::PassAllFilter(on) => {
            flag("pass_all_filter", *on)?;
            RowFilter::PassAll
        }
        F::BlockAllFilter(on) => {
            flag("block_all_filter", *on)?;
            RowFilter::BlockAll
        }
        F::RowKeyRegexFilter(r) => RowFilter::RowKeyRegex(r.clone()),
        F::RowSampleFilter(p) => RowFilter::RowSample(*p),
        F::FamilyNameRegexFilter(r) => RowFilter::FamilyNameRegex(r.clone()),
        F::ColumnQualifierRegexFilter(r) => RowFilter::ColumnQualifierRegex(r.clone()),
        F::ColumnRangeFilter(r) => RowFilter::ColumnRange {
            family: r.family_name.clone(),
            start: match &r.start_qualifier {
                Some(SQ::StartQualifierClosed(q)) => Bound::Included(q.clone()),
                Some(SQ::StartQualifierOpen(q)) => Bound::Excluded(q.clone()),
                None => Bound::Unbounded,
            },
            end: match &r.end_qualifier {
                Some(EQ::EndQualifierClosed(q)) => Bound::Included(q.clone()),
                Some(EQ::EndQualifierOpen(q)) => Bound::Excluded(q.clone()),
                None => Bound::Unbounded,
            },
        },
        F::TimestampRangeFilter(r) => {
            let t: TimeRange = crate::data::mutate::time_range(Some(r))?;
            RowFilter::TimestampRange(t)
        }
        F::ValueRegexFilter(r) => RowFilter::ValueRegex(r.clone()),
        F::ValueRangeFilter(r) => RowFilter::ValueRange {
            start: match &r.start_value {
                Some(SV::StartValueClosed(v)) => Bound::Included(v.clone()),
                Some(SV::StartValueOpen(v)) => Bound::Excluded(v.clone()),
                None => Bound::Unbounded,
            },
            end: match &r.end_value {
                Some(EV::EndValueClosed(v)) => Bound::Included(v.clone()),
                Some(EV::EndValueOpen(v)) => Bound::Excluded(v.clone()),
                None => Bound::Unbounded,
            },
        },
        F::CellsPerRowOffsetFilter(n) => {
            RowFilter::CellsPerRowOffset(count("cells_per_row_offset_filter", *n)?)
        }
        F::CellsPerRowLimitFilter(n) => {
            RowFilter::CellsPerRowLimit(count("cells_per_row_limit_filter", *n)?)
        }
        F::CellsPerColumnLimitFilter(n) => {
            RowFilter::CellsPerColumnLimit(count("cells_per_column_limit_filter", *n)?)
        }
        F::StripValueTransformer(on) => {
            flag("strip_value_transformer", *on)?;
            RowFilter::StripValue
        }
        F::ApplyLabelTransformer(l) => RowFilter::ApplyLabel(l.clone()),
    })
}

/// Whether the filter labels cells. The engine's filtered scan returns
/// plain cells, so a labelling filter runs here on each row instead.
pub fn labels(f: &RowFilter) -> bool {
    match f {
        RowFilter::ApplyLabel(_) => true,
        RowFilter::Chain(v) | RowFilter::Interleave(v) => v.iter().any(labels),
        RowFilter::Condition {
            predicate: _,
            true_filter,
            false_filter,
        } => [true_filter, false_filter]
            .into_iter()
            .flatten()
            .any(|f| labels(f)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn rf(f: F) -> v2::RowFilter {
        v2::RowFilter { filter: Some(f) }
    }

    #[test]
    fn converts_and_checks() {
        assert_eq!(from_api(None).unwrap(), None);
        assert_eq!(
            from_api(Some(&v2::RowFilter { filter: None })).unwrap(),
            None
        );
        let chain = rf(F::Chain(v2::row_filter::Chain {
            filters: vec![
                rf(F::CellsPerColumnLimitFilter(1)),
                rf(F::ApplyLabelTransformer("x".into())),
            ],
        }));
        let f = from_api(Some(&chain)).unwrap().unwrap();
        assert!(labels(&f));
        assert!(from_api(Some(&rf(F::CellsPerRowLimitFilter(-1)))).is_err());
        assert!(from_api(Some(&rf(F::PassAllFilter(false)))).is_err());
        assert!(from_api(Some(&rf(F::RowSampleFilter(2.0)))).is_err());
        let ts = from_api(Some(&rf(F::TimestampRangeFilter(v2::TimestampRange {
            start_timestamp_micros: 5,
            end_timestamp_micros: 0,
        }))))
        .unwrap();
        assert_eq!(
            ts,
            Some(RowFilter::TimestampRange(TimeRange {
                start: 5,
                end: u64::MAX
            }))
        );
    }
}
