//! Typed views of records (see [`crate::reader::decode_record`]) that read the way
//! `value.get(key).and_then(Value::as_…)` reads a tree: a value of another type is absent,
//! never an error, and nothing of a value that is not kept is built.
//!
//! A view accepts and rejects exactly the lines a tree does. Whatever it does not keep is still
//! parsed as a tree would parse it (nesting depth, numbers in range, string escapes), only
//! without building anything: [`Skip`] asks for `deserialize_any`, where serde's `IgnoredAny`
//! (and so a derived struct's unknown fields) would let serde_json skim it without those checks.

use std::fmt;

use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};

/// Any JSON value, checked as a tree would check it and dropped.
pub(crate) struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Skip;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_none<E: de::Error>(self) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Skip, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Skip)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Skip, A::Error> {
                skip_entries(map)?;
                Ok(Skip)
            }
        }
        d.deserialize_any(V)
    }
}

/// Skips the rest of an object, its keys checked as [`Key`]s.
fn skip_entries<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_key::<Key<'de>>()?.is_some() {
        map.next_value::<Skip>()?;
    }
    Ok(())
}

/// The key by which serde_json's `raw_value` feature (on in this build) marks an object that a
/// tree replaces with the JSON held in its string. A view cannot do the same, so reading a
/// line's text it refuses the line and leaves it to the tree (see
/// [`crate::reader::decode_record`]).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// An object key, borrowed from the line when it has no escapes. [`RAW_VALUE_TOKEN`] is an
/// error when read from text (serde_json hands such keys over borrowed or as `&str`), and an
/// ordinary key when read from a tree, which hands over its own `String`s: there the tree has
/// already done what the token asks, and what is left is a plain key.
pub(crate) enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                refuse_token(s)?;
                Ok(Key::Borrowed(s))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                refuse_token(s)?;
                Ok(Key::Owned(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s))
            }
        }
        d.deserialize_str(V)
    }
}

fn refuse_token<E: de::Error>(key: &str) -> Result<(), E> {
    if key == RAW_VALUE_TOKEN {
        return Err(E::custom("a raw-value token: left to a tree"));
    }
    Ok(())
}

/// A struct whose fields are read from an object by key (the last of a key given twice wins,
/// as in a tree); other keys are [`Skip`]ped. Every field type must accept any JSON value.
macro_rules! view {
    ($(#[$m:meta])* struct $name:ident {
        $($(#[$fm:meta])* $key:literal => $field:ident: $ty:ty,)*
    }) => {
        $(#[$m])*
        #[derive(Default)]
        struct $name {
            $($(#[$fm])* $field: $ty,)*
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("a JSON object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$name, A::Error> {
                        let mut out = $name::default();
                        while let Some(key) = map.next_key::<$crate::loose::Key<'de>>()? {
                            match key.as_str() {
                                $($key => out.$field = map.next_value()?,)*
                                _ => {
                                    map.next_value::<$crate::loose::Skip>()?;
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}
pub(crate) use view;

/// What a visitor keeps of a string, a boolean, a non-negative integer or an object; every
/// other value (and every kind the type does not take) is `None`.
trait Pick: Sized {
    const EXPECTS: &'static str;
    fn string(_: &str) -> Option<Self> {
        None
    }
    fn bool(_: bool) -> Option<Self> {
        None
    }
    fn u64(_: u64) -> Option<Self> {
        None
    }
    fn map<'de, A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        skip_entries(map)?;
        Ok(None)
    }
}

struct PickVisitor<P>(std::marker::PhantomData<P>);

impl<'de, P: Pick> Visitor<'de> for PickVisitor<P> {
    type Value = Option<P>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(P::EXPECTS)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(P::bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(P::u64(v))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(P::string(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        P::map(map)
    }
}

fn pick<'de, P: Pick, D: Deserializer<'de>>(d: D) -> Result<Option<P>, D::Error> {
    d.deserialize_any(PickVisitor::<P>(std::marker::PhantomData))
}

/// A field that counts only when it is a string: `str_of` / `string_of` of a tree.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Str(pub Option<String>);

impl Str {
    /// The string, empty or not.
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// The string when it is not empty, owned.
    pub(crate) fn non_empty(&self) -> Option<String> {
        self.0.as_ref().filter(|s| !s.is_empty()).cloned()
    }
}

impl Pick for String {
    const EXPECTS: &'static str = "any JSON value (only a string is kept)";
    fn string(s: &str) -> Option<Self> {
        Some(s.to_owned())
    }
}

impl<'de> Deserialize<'de> for Str {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        pick::<String, D>(d).map(Str)
    }
}

/// A flag that is set only by JSON `true`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Flag(pub bool);

impl Pick for bool {
    const EXPECTS: &'static str = "any JSON value (only a boolean is kept)";
    fn bool(b: bool) -> Option<Self> {
        Some(b)
    }
}

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        pick::<bool, D>(d).map(|b| Flag(b == Some(true)))
    }
}

/// A count: a JSON integer that fits `u64`, else 0 (`u64_of` of a tree).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Count(pub u64);

impl Pick for u64 {
    const EXPECTS: &'static str = "any JSON value (only a non-negative integer is kept)";
    fn u64(n: u64) -> Option<Self> {
        Some(n)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        pick::<u64, D>(d).map(|n| Count(n.unwrap_or(0)))
    }
}

/// Whether a field holds anything but `null`; its content is skipped, not built.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct NotNull(pub bool);

impl<'de> Deserialize<'de> for NotNull {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // `null` is `None`; anything else is `Some`, checked by `Skip`.
        Option::<Skip>::deserialize(d).map(|s| NotNull(s.is_some()))
    }
}

/// A field that is an object of shape `T` (anything else reads as no object, its content
/// skipped). `T`'s own fields must be loose too.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Obj<T>(Option<T>);

impl<T> Obj<T> {
    pub(crate) fn object(&self) -> Option<&T> {
        self.0.as_ref()
    }
}

/// What [`Obj`] keeps of an object: the whole of it, read as `T`.
struct Whole<T>(T);

impl<T: DeserializeOwned> Pick for Whole<T> {
    const EXPECTS: &'static str = "any JSON value (only an object is kept)";
    fn map<'de, A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(|t| Some(Whole(t)))
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        pick::<Whole<T>, D>(d).map(|w| Obj(w.map(|w| w.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    view! {
        struct View {
            "s" => s: Str,
            "f" => f: Flag,
            "n" => n: Count,
            "x" => x: NotNull,
            "o" => o: Obj<Inner>,
        }
    }

    view! {
        #[derive(Debug, PartialEq)]
        struct Inner {
            "s" => s: Str,
        }
    }

    fn view(json: &str) -> View {
        serde_json::from_str(json).expect("every object fits a loose view")
    }

    #[test]
    fn fields_of_the_expected_type_are_read() {
        let v = view(r#"{"s":"a","f":true,"n":7,"x":{"big":[1,2]},"o":{"s":"in","t":1}}"#);
        assert_eq!(v.s.get(), Some("a"));
        assert!(v.f.0);
        assert_eq!(v.n.0, 7);
        assert!(v.x.0);
        assert_eq!(v.o.object().and_then(|i| i.s.get()), Some("in"));
    }

    #[test]
    fn fields_of_another_type_read_as_absent_like_a_tree() {
        let v = view(r#"{"s":12,"f":"true","n":-3,"x":null,"o":[{"s":"in"}]}"#);
        assert_eq!(v.s.get(), None);
        assert!(!v.f.0);
        assert_eq!(v.n.0, 0);
        assert!(!v.x.0);
        assert_eq!(v.o.object(), None);
        let v = view(r#"{"s":{"a":"b"},"n":2.5,"x":false,"o":"text"}"#);
        assert_eq!(v.s.get(), None);
        assert_eq!(v.n.0, 0);
        assert!(v.x.0, "false is not null");
        assert_eq!(v.o.object(), None);
        let v = view("{}");
        assert_eq!((v.s.get(), v.f.0, v.n.0, v.x.0), (None, false, 0, false));
        assert_eq!(v.o.object(), None);
    }

    #[test]
    fn a_view_rejects_what_a_tree_rejects() {
        let deep = format!(r#"{{"x":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
        let deep_kept = format!(r#"{{"o":{{"s":{}1{}}}}}"#, "[".repeat(200), "]".repeat(200));
        let lines = [
            deep.as_str(),
            deep_kept.as_str(),
            r#"{"x":1e400}"#,
            r#"{"x":{"y":[1,-1e999]}}"#,
            r#"{"unknown":{"k":2e308}}"#,
            r#"{"x":"\u12"}"#,
            r#"{"x":"\ud83d"}"#,
            r#"{"s":"a","x":tru}"#,
            // serde_json's raw-value token: a tree reads the JSON in its string instead.
            r#"{"$serde_json::private::RawValue":"x","s":"a"}"#,
            r#"{"$serde_json::private::RawValue":5}"#,
            r#"{"x":{"$serde_json::private::RawValue":"\"\\ud800\""}}"#,
            "{\"x\":\"tab\there\"}",
        ];
        for line in lines {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_err(),
                "{line}"
            );
            assert!(serde_json::from_str::<View>(line).is_err(), "{line}");
        }
        let ok = format!(
            r#"{{"x":{}1{},"n":1e300}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(serde_json::from_str::<serde_json::Value>(&ok).is_ok());
        assert!(serde_json::from_str::<View>(&ok).is_ok());
    }

    #[test]
    fn a_raw_value_token_is_left_to_a_tree() {
        // A tree accepts these and reads the JSON inside the string; a view must not read
        // them some other way, so it fails and the caller decodes the line as a tree.
        for line in [
            r#"{"$serde_json::private::RawValue":"{\"s\":\"t\"}"}"#,
            r#"{"s":{"$serde_json::private::RawValue":"\"x\""}}"#,
            r#"{"o":{"$serde_json::private::RawValue":"{\"s\":\"in\"}"}}"#,
            r#"{"n":[{"$serde_json::private::RawValue":"1"}]}"#,
        ] {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_ok(),
                "{line}"
            );
            assert!(serde_json::from_str::<View>(line).is_err(), "{line}");
        }
    }

    #[test]
    fn a_key_given_twice_reads_as_the_last_like_a_tree() {
        assert_eq!(view(r#"{"s":"a","s":5}"#).s.get(), None);
        assert_eq!(view(r#"{"s":5,"s":"b"}"#).s.get(), Some("b"));
    }

    #[test]
    fn empty_strings_are_kept_but_not_non_empty() {
        let v = view(r#"{"s":""}"#);
        assert_eq!(v.s.get(), Some(""));
        assert_eq!(v.s.non_empty(), None);
    }
}
