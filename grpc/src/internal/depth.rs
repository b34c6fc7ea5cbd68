//! A serde deserializer that refuses a value nested deeper than a bound
//! before it recurses further: the engine's row filter is recursive
//! (`Condition`, `Chain`, `Interleave` hold filters), and a derived
//! `Deserialize` recurses once per level, so a payload nested ten thousand
//! levels deep (a few tens of KB) would overflow the decoding thread's stack
//! and abort the daemon. Every sequence, map, enum, option and newtype
//! entered counts one level (a filter level costs two: its enum and its
//! fields). It also caps the room reserved for a collection on the word
//! of its stated length (see [`MAX_RESERVE`]).

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};
use std::cell::Cell;
use std::fmt;

/// Levels a message of the internal RPC may nest: a filter of the engine's
/// deepest (`engine::filter::MAX_DEPTH`, 32) costs about 70 with the call
/// around it.
pub(crate) const MAX_DECODE_DEPTH: u32 = 128;

/// Elements a collection is given room for before they arrive: bincode
/// states a sequence's length up front, and serde reserves room for up to
/// 1 MiB of elements on that word alone, so 13 bytes of a nested filter
/// could claim a megabyte at each of many levels. Past this, a vector
/// grows as its elements really come.
const MAX_RESERVE: usize = 1024;

fn capped(hint: Option<usize>) -> Option<usize> {
    hint.map(|n| n.min(MAX_RESERVE))
}

/// Levels left.
pub(crate) struct Budget {
    left: Cell<u32>,
    max: u32,
}

impl Budget {
    pub(crate) fn new(max: u32) -> Budget {
        Budget {
            left: Cell::new(max),
            max,
        }
    }

    fn enter<E: de::Error>(&self) -> Result<(), E> {
        match self.left.get() {
            0 => Err(E::custom(format_args!(
                "a value nested deeper than {} levels",
                self.max
            ))),
            n => {
                self.left.set(n - 1);
                Ok(())
            }
        }
    }

    fn leave(&self) {
        self.left.set(self.left.get() + 1);
    }

    fn within<T, E: de::Error>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        self.enter()?;
        let r = f();
        self.leave();
        r
    }
}

/// `D`, counting levels against `budget`.
pub(crate) struct Bounded<'b, D> {
    de: D,
    budget: &'b Budget,
}

impl<'b, D> Bounded<'b, D> {
    pub(crate) fn new(de: D, budget: &'b Budget) -> Self {
        Bounded { de, budget }
    }
}

/// A visitor whose nested parts are bounded too.
struct V<'b, X> {
    v: X,
    budget: &'b Budget,
}

/// A seed whose deserializer is bounded.
struct S<'b, X> {
    seed: X,
    budget: &'b Budget,
}

impl<'de, X: DeserializeSeed<'de>> DeserializeSeed<'de> for S<'_, X> {
    type Value = X::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<X::Value, D::Error> {
        self.seed.deserialize(Bounded::new(d, self.budget))
    }
}

/// Sequence, map and enum access with bounded parts.
struct A<'b, X> {
    a: X,
    budget: &'b Budget,
}

impl<'de, X: de::SeqAccess<'de>> de::SeqAccess<'de> for A<'_, X> {
    type Error = X::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, X::Error> {
        self.a.next_element_seed(S {
            seed,
            budget: self.budget,
        })
    }
    fn size_hint(&self) -> Option<usize> {
        capped(self.a.size_hint())
    }
}

impl<'de, X: de::MapAccess<'de>> de::MapAccess<'de> for A<'_, X> {
    type Error = X::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, X::Error> {
        self.a.next_key_seed(S {
            seed,
            budget: self.budget,
        })
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, X::Error> {
        self.a.next_value_seed(S {
            seed,
            budget: self.budget,
        })
    }
    fn size_hint(&self) -> Option<usize> {
        capped(self.a.size_hint())
    }
}

impl<'de, 'b, X: de::EnumAccess<'de>> de::EnumAccess<'de> for A<'b, X> {
    type Error = X::Error;
    type Variant = A<'b, X::Variant>;
    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), X::Error> {
        let budget = self.budget;
        let (value, a) = self.a.variant_seed(S { seed, budget })?;
        Ok((value, A { a, budget }))
    }
}

impl<'de, X: de::VariantAccess<'de>> de::VariantAccess<'de> for A<'_, X> {
    type Error = X::Error;
    fn unit_variant(self) -> Result<(), X::Error> {
        self.a.unit_variant()
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, X::Error> {
        self.a.newtype_variant_seed(S {
            seed,
            budget: self.budget,
        })
    }
    fn tuple_variant<T: Visitor<'de>>(self, len: usize, v: T) -> Result<T::Value, X::Error> {
        self.a.tuple_variant(
            len,
            V {
                v,
                budget: self.budget,
            },
        )
    }
    fn struct_variant<T: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        v: T,
    ) -> Result<T::Value, X::Error> {
        self.a.struct_variant(
            fields,
            V {
                v,
                budget: self.budget,
            },
        )
    }
}

macro_rules! forward_scalars {
    ($($f:ident: $t:ty),*) => {$(
        fn $f<E: de::Error>(self, x: $t) -> Result<Self::Value, E> {
            self.v.$f(x)
        }
    )*};
}

impl<'de, X: Visitor<'de>> Visitor<'de> for V<'_, X> {
    type Value = X::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.v.expecting(f)
    }

    forward_scalars!(visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32,
        visit_i64: i64, visit_i128: i128, visit_u8: u8, visit_u16: u16, visit_u32: u32,
        visit_u64: u64, visit_u128: u128, visit_f32: f32, visit_f64: f64, visit_char: char,
        visit_str: &str, visit_string: String, visit_bytes: &[u8], visit_byte_buf: Vec<u8>);

    fn visit_borrowed_str<E: de::Error>(self, x: &'de str) -> Result<X::Value, E> {
        self.v.visit_borrowed_str(x)
    }
    fn visit_borrowed_bytes<E: de::Error>(self, x: &'de [u8]) -> Result<X::Value, E> {
        self.v.visit_borrowed_bytes(x)
    }
    fn visit_none<E: de::Error>(self) -> Result<X::Value, E> {
        self.v.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<X::Value, E> {
        self.v.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<X::Value, D::Error> {
        let budget = self.budget;
        budget.within(|| self.v.visit_some(Bounded::new(d, budget)))
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<X::Value, D::Error> {
        let budget = self.budget;
        budget.within(|| self.v.visit_newtype_struct(Bounded::new(d, budget)))
    }
    fn visit_seq<Q: de::SeqAccess<'de>>(self, a: Q) -> Result<X::Value, Q::Error> {
        let budget = self.budget;
        budget.within(|| self.v.visit_seq(A { a, budget }))
    }
    fn visit_map<M: de::MapAccess<'de>>(self, a: M) -> Result<X::Value, M::Error> {
        let budget = self.budget;
        budget.within(|| self.v.visit_map(A { a, budget }))
    }
    fn visit_enum<N: de::EnumAccess<'de>>(self, a: N) -> Result<X::Value, N::Error> {
        let budget = self.budget;
        budget.within(|| self.v.visit_enum(A { a, budget }))
    }
}

macro_rules! forward {
    ($($f:ident),*) => {$(
        fn $f<T: Visitor<'de>>(self, v: T) -> Result<T::Value, D::Error> {
            self.de.$f(V { v, budget: self.budget })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Bounded<'_, D> {
    type Error = D::Error;

    forward!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any
    );

    fn deserialize_unit_struct<T: Visitor<'de>>(
        self,
        name: &'static str,
        v: T,
    ) -> Result<T::Value, D::Error> {
        let budget = self.budget;
        self.de.deserialize_unit_struct(name, V { v, budget })
    }
    fn deserialize_newtype_struct<T: Visitor<'de>>(
        self,
        name: &'static str,
        v: T,
    ) -> Result<T::Value, D::Error> {
        let budget = self.budget;
        self.de.deserialize_newtype_struct(name, V { v, budget })
    }
    fn deserialize_tuple<T: Visitor<'de>>(self, len: usize, v: T) -> Result<T::Value, D::Error> {
        let budget = self.budget;
        self.de.deserialize_tuple(len, V { v, budget })
    }
    fn deserialize_tuple_struct<T: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        v: T,
    ) -> Result<T::Value, D::Error> {
        let budget = self.budget;
        self.de.deserialize_tuple_struct(name, len, V { v, budget })
    }
    fn deserialize_struct<T: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: T,
    ) -> Result<T::Value, D::Error> {
        let budget = self.budget;
        self.de.deserialize_struct(name, fields, V { v, budget })
    }
    fn deserialize_enum<T: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: T,
    ) -> Result<T::Value, D::Error> {
        let budget = self.budget;
        self.de.deserialize_enum(name, variants, V { v, budget })
    }
    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}
