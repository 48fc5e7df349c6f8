/// LiteLLM's fields a price is read from, in the order the compiled table keeps them (also
/// read by `build.rs`): input, output, cache write, cache read, then the same past 200k tokens.
pub(crate) const FIELDS: [&str; 8] = [
    "input_cost_per_token",
    "output_cost_per_token",
    "cache_creation_input_token_cost",
    "cache_read_input_token_cost",
    "input_cost_per_token_above_200k_tokens",
    "output_cost_per_token_above_200k_tokens",
    "cache_creation_input_token_cost_above_200k_tokens",
    "cache_read_input_token_cost_above_200k_tokens",
];
