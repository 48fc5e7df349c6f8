//! Compiles the shipped price table (`prices.json`, LiteLLM's fields) into a sorted static
//! array, so that a report (and the status line, run on every prompt) finds a model by binary
//! search instead of parsing 600 KB of JSON at each start.

use std::fmt::Write as _;

include!("src/fields.rs");

fn main() {
    println!("cargo:rerun-if-changed=prices.json");
    println!("cargo:rerun-if-changed=src/fields.rs");
    let text = std::fs::read_to_string("prices.json").expect("prices.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("prices.json is JSON");
    let models = v["models"].as_object().expect("prices.json has models");
    // BTreeMap order is byte order: what `binary_search_by(str::cmp)` needs.
    let sorted: std::collections::BTreeMap<&String, &serde_json::Value> = models.iter().collect();
    let mut out = String::new();
    writeln!(
        out,
        "/// The shipped table's source and day.\npub(crate) const SHIPPED_SOURCE: &str = {:?};\npub(crate) const SHIPPED_DATE: &str = {:?};",
        v["source"].as_str().expect("source"),
        v["date"].as_str().expect("date")
    )
    .unwrap();
    writeln!(
        out,
        "/// (model, its eight LiteLLM fields in `FIELDS` order, NaN where absent), by name.\npub(crate) static SHIPPED: [(&str, [f64; 8]); {}] = [",
        sorted.len()
    )
    .unwrap();
    for (name, e) in sorted {
        let vals: Vec<String> = FIELDS
            .iter()
            .map(|f| match e.get(*f).and_then(serde_json::Value::as_f64) {
                Some(x) => format!("{x:e}"),
                None => "f64::NAN".into(),
            })
            .collect();
        writeln!(out, "    ({name:?}, [{}]),", vals.join(", ")).unwrap();
    }
    out.push_str("];\n");
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("shipped_prices.rs");
    std::fs::write(dest, out).unwrap();
}
