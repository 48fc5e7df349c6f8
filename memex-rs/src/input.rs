//! What is wrong with a request that came from outside (an HTTP body, a hook's request to the
//! service, a command's flags turned into one): the field, and what it must be.

/// One field of a request that cannot be taken, named as the caller spelled it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct BadField {
    /// The field's name; empty when the request as a whole is wrong (not an object, a choice
    /// of fields).
    pub field: String,
    /// What it must be (or what is wrong), after its name: "must be true or false".
    pub problem: String,
}

impl BadField {
    pub fn new(field: impl Into<String>, problem: impl std::fmt::Display) -> BadField {
        BadField {
            field: field.into(),
            problem: problem.to_string(),
        }
    }

    /// The request as a whole is wrong.
    pub fn request(problem: impl std::fmt::Display) -> BadField {
        BadField::new("", problem)
    }

    fn message(&self) -> String {
        if self.field.is_empty() {
            self.problem.clone()
        } else {
            format!("`{}` {}", self.field, self.problem)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_field() {
        let e = BadField::new("dry_run", "must be true or false");
        assert_eq!(e.to_string(), "`dry_run` must be true or false");
        assert_eq!(e.field, "dry_run");
        let whole = BadField::request("the body must be a JSON object");
        assert_eq!(whole.to_string(), "the body must be a JSON object");
        assert!(whole.field.is_empty());
    }
}
