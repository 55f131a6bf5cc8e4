//! Reading a JSON object field by field, so every rejection names the field at fault.
//!
//! Bodies are parsed into `serde_json::Value` at the edge (`platform::body`), then walked here.
//! Messages name the field and the rule, never the value the client sent.

use serde_json::{Map, Value};

use super::Invalid;

/// One JSON object being read, with the path used in error messages (`""` for the body,
/// `"messages[2]"` for an element).
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    pub fn root(map: &'a Map<String, Value>) -> Self {
        Fields {
            map,
            path: String::new(),
        }
    }

    /// The element `value` at `path`, which must be an object.
    pub fn nested(value: &'a Value, path: String) -> Result<Self, Invalid> {
        match value {
            Value::Object(map) => Ok(Fields { map, path }),
            _ => Err(Invalid::new(path, "must be an object")),
        }
    }

    /// The full name of a field for error messages.
    pub fn name(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    /// The field's value; `null` counts as absent.
    pub fn optional(&self, field: &str) -> Option<&'a Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    /// The field read by `read` (`Value::as_str`, ...), absent as `None`; `rule` names a value
    /// of another type.
    fn optional_as<T>(
        &self,
        field: &str,
        read: impl FnOnce(&'a Value) -> Option<T>,
        rule: &str,
    ) -> Result<Option<T>, Invalid> {
        self.optional(field)
            .map(|v| read(v).ok_or_else(|| Invalid::new(self.name(field), rule)))
            .transpose()
    }

    pub fn required(&self, field: &str) -> Result<&'a Value, Invalid> {
        self.optional(field)
            .ok_or_else(|| Invalid::new(self.name(field), "is required"))
    }

    pub fn required_str(&self, field: &str) -> Result<&'a str, Invalid> {
        self.required(field)?
            .as_str()
            .ok_or_else(|| Invalid::new(self.name(field), "must be a string"))
    }

    pub fn optional_str(&self, field: &str) -> Result<Option<&'a str>, Invalid> {
        self.optional_as(field, Value::as_str, "must be a string")
    }

    /// A string of `min..=max` characters (Unicode scalar values, as clients count them).
    pub fn required_text(&self, field: &str, min: usize, max: usize) -> Result<&'a str, Invalid> {
        let s = self.required_str(field)?;
        check_length(&self.name(field), s, min, max)?;
        Ok(s)
    }

    pub fn optional_text(
        &self,
        field: &str,
        min: usize,
        max: usize,
    ) -> Result<Option<&'a str>, Invalid> {
        match self.optional_str(field)? {
            None => Ok(None),
            Some(s) => {
                check_length(&self.name(field), s, min, max)?;
                Ok(Some(s))
            }
        }
    }

    /// An integer in `min..=max`. JSON has one number type, so `500.0` is the integer 500 (as in
    /// JSON Schema); `2.5`, `"1"` and out-of-range numbers are rejected.
    pub fn optional_int(&self, field: &str, min: i64, max: i64) -> Result<Option<i64>, Invalid> {
        let Some(v) = self.optional(field) else {
            return Ok(None);
        };
        let rule = || {
            Invalid::new(
                self.name(field),
                format!("must be an integer from {min} to {max}"),
            )
        };
        let n = match v.as_i64() {
            Some(n) => n,
            None => match v.as_f64() {
                Some(f) if f.fract() == 0.0 && f >= min as f64 && f <= max as f64 => f as i64,
                _ => return Err(rule()),
            },
        };
        if (min..=max).contains(&n) {
            Ok(Some(n))
        } else {
            Err(rule())
        }
    }

    pub fn required_array(&self, field: &str) -> Result<&'a Vec<Value>, Invalid> {
        self.required(field)?
            .as_array()
            .ok_or_else(|| Invalid::new(self.name(field), "must be an array"))
    }

    pub fn optional_array(&self, field: &str) -> Result<Option<&'a Vec<Value>>, Invalid> {
        self.optional_as(field, Value::as_array, "must be an array")
    }

    pub fn optional_bool(&self, field: &str) -> Result<Option<bool>, Invalid> {
        self.optional_as(field, Value::as_bool, "must be a boolean")
    }
}

pub fn check_length(name: &str, s: &str, min: usize, max: usize) -> Result<(), Invalid> {
    let n = s.chars().count();
    if n < min || n > max {
        let rule = if min == max {
            format!("must be {min} characters")
        } else {
            format!("must be {min} to {max} characters")
        };
        return Err(Invalid::new(name, rule));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_must_be_integral_and_in_range() {
        let map = json!({"a": 2.5, "b": "1", "c": 5000, "d": 7, "e": null, "f": 3.0, "g": 1e300});
        let f = Fields::root(map.as_object().unwrap());
        assert!(f.optional_int("a", 1, 10).is_err());
        assert_eq!(f.optional_int("f", 1, 10).unwrap(), Some(3));
        assert!(f.optional_int("g", 1, 10).is_err());
        assert!(f.optional_int("b", 1, 10).is_err());
        assert_eq!(
            f.optional_int("c", 1, 4096).unwrap_err().to_string(),
            "c must be an integer from 1 to 4096"
        );
        assert_eq!(f.optional_int("d", 1, 10).unwrap(), Some(7));
        assert_eq!(f.optional_int("e", 1, 10).unwrap(), None);
    }

    #[test]
    fn lengths_count_characters_not_bytes() {
        let map = json!({"s": "こんにちは"});
        let f = Fields::root(map.as_object().unwrap());
        assert_eq!(f.required_text("s", 1, 5).unwrap(), "こんにちは");
        assert!(f.required_text("s", 1, 4).is_err());
    }
}
