//! A member's token: `mxt_` and 64 hex digits (32 random bytes). The team archive keeps its
//! SHA-256 only, and a hint (its first 8 digits) for `memex team token list`; the token itself
//! is shown once, when it is made. A token is long and random, so one round of SHA-256 is as
//! hard to reverse as the token is to guess.

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

const PREFIX: &str = "mxt_";
const HEX_LEN: usize = 64;

/// A token, wiped from memory when dropped.
pub struct Token(Zeroizing<String>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({}…)", self.hint())
    }
}

/// What is not a token, and why (the text never repeats what was given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadToken {
    #[error("it is empty")]
    Empty,
    #[error("a team token starts with `mxt_`")]
    Prefix,
    #[error("a team token is `mxt_` and 64 hex digits; this one has {0} characters after `mxt_`")]
    Length(usize),
    #[error("a team token is `mxt_` and 64 hex digits (0-9, a-f); this one has other characters")]
    Digits,
}

impl Token {
    /// A new random token.
    pub fn generate() -> Token {
        let mut b = Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut b[..])
            .expect("the operating system's random generator is unavailable");
        Token(Zeroizing::new(format!("{PREFIX}{}", hex::encode(&b[..]))))
    }

    /// A token as a user gives it (a file's text, stdin, an `Authorization` header): surrounding
    /// white space is dropped, the rest must be a token.
    pub fn parse(text: &str) -> Result<Token, BadToken> {
        let t = text.trim();
        if t.is_empty() {
            return Err(BadToken::Empty);
        }
        let Some(digits) = t.strip_prefix(PREFIX) else {
            return Err(BadToken::Prefix);
        };
        if digits.len() != HEX_LEN {
            return Err(BadToken::Length(digits.chars().count()));
        }
        if !digits
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(BadToken::Digits);
        }
        Ok(Token(Zeroizing::new(t.to_owned())))
    }

    /// The token's text, to print once or to write to its owner's file.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What the team archive keeps of it.
    pub fn hash(&self) -> Vec<u8> {
        Sha256::digest(self.0.as_bytes()).to_vec()
    }

    /// Its first 8 digits, by which a person tells tokens apart.
    pub fn hint(&self) -> String {
        self.0[PREFIX.len()..PREFIX.len() + 8].to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_read_back() {
        let (a, b) = (Token::generate(), Token::generate());
        assert_ne!(a.expose(), b.expose());
        let again = Token::parse(&format!("  {}\n", a.expose())).unwrap();
        assert_eq!(again.hash(), a.hash());
        assert_eq!(a.hash().len(), 32);
        assert_ne!(a.hash(), b.hash());
        assert!(!format!("{a:?}").contains(&a.expose()[12..]));
    }

    #[test]
    fn what_is_not_a_token_is_named() {
        let t = Token::generate();
        let body = &t.expose()[4..];
        assert_eq!(Token::parse(" ").unwrap_err(), BadToken::Empty);
        assert_eq!(Token::parse(body).unwrap_err(), BadToken::Prefix);
        assert_eq!(
            Token::parse(&format!("mxt_{}", &body[1..])).unwrap_err(),
            BadToken::Length(63)
        );
        assert_eq!(
            Token::parse(&format!("mxt_{}", body.to_uppercase())).unwrap_err(),
            BadToken::Digits
        );
        let err = Token::parse(&format!("mxt_{}Z", &body[1..])).unwrap_err();
        assert!(!err.to_string().contains(&body[1..]));
    }
}
