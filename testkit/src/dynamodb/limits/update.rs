//! An UpdateItem's after-image, for the limits model: evaluates an UpdateExpression (`SET a =
//! :v`, `if_not_exists`, `list_append`, `a + :v`, `a - :v`, `REMOVE`, `ADD`, `DELETE`, on
//! top-level attributes) against the item's before-image. What it cannot evaluate (nested paths,
//! an operand naming a missing attribute, a malformed expression) is an [`Unevaluable`], and the
//! caller falls back to [`mentioned_attributes`].

use serde_json::{Map, Value};

use super::cost::Item;

/// Why an UpdateExpression was not evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unevaluable(pub String);

#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// A name, a keyword, a function or a list index.
    Word(String),
    /// `#alias`.
    Alias(String),
    /// `:value`.
    Value(String),
    Symbol(char),
}

fn tokens(expression: &str) -> Result<Vec<Token>, Unevaluable> {
    let mut out = Vec::new();
    let mut chars = expression.chars().peekable();
    let word = |first: char, chars: &mut std::iter::Peekable<std::str::Chars>| {
        let mut word = String::from(first);
        while let Some(c) = chars.next_if(|c| c.is_alphanumeric() || *c == '_') {
            word.push(c);
        }
        word
    };
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '#' => out.push(Token::Alias(word('#', &mut chars))),
            ':' => out.push(Token::Value(word(':', &mut chars))),
            '=' | '+' | '-' | ',' | '(' | ')' | '.' | '[' | ']' => out.push(Token::Symbol(c)),
            c if c.is_alphanumeric() || c == '_' => out.push(Token::Word(word(c, &mut chars))),
            c => return Err(Unevaluable(format!("unexpected {c:?}"))),
        }
    }
    Ok(out)
}

const CLAUSES: [&str; 4] = ["SET", "REMOVE", "ADD", "DELETE"];

fn is_clause(token: Option<&Token>) -> bool {
    matches!(token, Some(Token::Word(w)) if CLAUSES.iter().any(|c| c.eq_ignore_ascii_case(w)))
}

/// The top-level attribute names an UpdateExpression's paths start with (aliases resolved):
/// what a conservative caller takes as changed when the expression cannot be evaluated.
pub fn mentioned_attributes(expression: &str, names: &Map<String, Value>) -> Vec<String> {
    let Ok(tokens) = tokens(expression) else {
        // Not even tokens: every aliased name is a guess as good as any.
        return names
            .values()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    };
    let mut mentioned = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let after_dot_or_bracket = i > 0 && matches!(tokens[i - 1], Token::Symbol('.' | '['));
        let function = matches!(tokens.get(i + 1), Some(Token::Symbol('(')));
        let name = match token {
            Token::Alias(alias) => names.get(alias).and_then(Value::as_str).map(str::to_owned),
            Token::Word(w) if !function && !is_clause(Some(token)) => Some(w.clone()),
            _ => None,
        };
        if let Some(name) = name.filter(|_| !after_dot_or_bracket)
            && !mentioned.contains(&name)
        {
            mentioned.push(name);
        }
    }
    mentioned
}

#[derive(Debug)]
enum Operand {
    Path(String),
    Value(Value),
    IfNotExists(String, Box<Operand>),
    ListAppend(Box<Operand>, Box<Operand>),
}

#[derive(Debug)]
enum Action {
    Set(String, Operand, Option<(char, Operand)>),
    Remove(String),
    Add(String, Value),
    Delete(String, Value),
}

struct Parser<'a> {
    tokens: Vec<Token>,
    at: usize,
    names: &'a Map<String, Value>,
    values: &'a Map<String, Value>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Result<Token, Unevaluable> {
        let token = self.peek().cloned();
        self.at += 1;
        token.ok_or_else(|| Unevaluable("the expression ends too early".into()))
    }

    fn symbol(&mut self, symbol: char) -> Result<(), Unevaluable> {
        match self.next()? {
            Token::Symbol(s) if s == symbol => Ok(()),
            other => Err(Unevaluable(format!("expected {symbol:?}, found {other:?}"))),
        }
    }

    fn eat(&mut self, symbol: char) -> bool {
        let found = self.peek() == Some(&Token::Symbol(symbol));
        self.at += usize::from(found);
        found
    }

    fn path(&mut self) -> Result<String, Unevaluable> {
        let name = match self.next()? {
            Token::Word(w) => w,
            Token::Alias(alias) => self
                .names
                .get(&alias)
                .and_then(Value::as_str)
                .ok_or_else(|| Unevaluable(format!("{alias} is not in ExpressionAttributeNames")))?
                .to_owned(),
            other => return Err(Unevaluable(format!("expected a path, found {other:?}"))),
        };
        if matches!(self.peek(), Some(Token::Symbol('.' | '['))) {
            return Err(Unevaluable(format!("a nested path under {name}")));
        }
        Ok(name)
    }

    fn value(&mut self) -> Result<Value, Unevaluable> {
        match self.next()? {
            Token::Value(v) => self
                .values
                .get(&v)
                .cloned()
                .ok_or_else(|| Unevaluable(format!("{v} is not in ExpressionAttributeValues"))),
            other => Err(Unevaluable(format!("expected a value, found {other:?}"))),
        }
    }

    fn operand(&mut self) -> Result<Operand, Unevaluable> {
        match self.peek() {
            Some(Token::Value(_)) => Ok(Operand::Value(self.value()?)),
            Some(Token::Word(f)) if self.tokens.get(self.at + 1) == Some(&Token::Symbol('(')) => {
                let function = f.clone();
                self.at += 2;
                let operand = match function.as_str() {
                    "if_not_exists" => {
                        let path = self.path()?;
                        self.symbol(',')?;
                        Operand::IfNotExists(path, Box::new(self.operand()?))
                    }
                    "list_append" => {
                        let first = self.operand()?;
                        self.symbol(',')?;
                        Operand::ListAppend(Box::new(first), Box::new(self.operand()?))
                    }
                    other => return Err(Unevaluable(format!("function {other}"))),
                };
                self.symbol(')')?;
                Ok(operand)
            }
            _ => Ok(Operand::Path(self.path()?)),
        }
    }

    fn actions(&mut self) -> Result<Vec<Action>, Unevaluable> {
        let mut actions = Vec::new();
        while self.peek().is_some() {
            let Token::Word(clause) = self.next()? else {
                return Err(Unevaluable("expected SET, REMOVE, ADD or DELETE".into()));
            };
            let clause = clause.to_ascii_uppercase();
            loop {
                let path = self.path()?;
                actions.push(match clause.as_str() {
                    "SET" => {
                        self.symbol('=')?;
                        let first = self.operand()?;
                        let second = match self.peek() {
                            Some(Token::Symbol(op @ ('+' | '-'))) => {
                                let op = *op;
                                self.at += 1;
                                Some((op, self.operand()?))
                            }
                            _ => None,
                        };
                        Action::Set(path, first, second)
                    }
                    "REMOVE" => Action::Remove(path),
                    "ADD" => Action::Add(path, self.value()?),
                    "DELETE" => Action::Delete(path, self.value()?),
                    other => return Err(Unevaluable(format!("unknown clause {other}"))),
                });
                if !self.eat(',') {
                    break;
                }
            }
            if self.peek().is_some() && !is_clause(self.peek()) {
                return Err(Unevaluable(format!("unexpected {:?}", self.peek())));
            }
        }
        Ok(actions)
    }
}

/// The item after `expression` is applied to `before` (the before-image, or just the key when
/// there was no item: UpdateItem creates it). Operands read `before`, as DynamoDB's do.
pub fn apply_update(
    before: &Item,
    expression: &str,
    names: &Map<String, Value>,
    values: &Map<String, Value>,
) -> Result<Item, Unevaluable> {
    let mut parser = Parser {
        tokens: tokens(expression)?,
        at: 0,
        names,
        values,
    };
    let actions = parser.actions()?;
    let mut after = before.clone();
    for action in actions {
        match action {
            Action::Set(path, first, second) => {
                let first = evaluate(before, &first)?;
                let value = match second {
                    None => first,
                    Some((op, second)) => arithmetic(&first, op, &evaluate(before, &second)?)?,
                };
                after.insert(path, value);
            }
            Action::Remove(path) => {
                after.remove(&path);
            }
            Action::Add(path, value) => {
                let value = match before.get(&path) {
                    None => value,
                    Some(old) if old.get("N").is_some() => arithmetic(old, '+', &value)?,
                    Some(old) => set_update(old, &value, true)?,
                };
                after.insert(path, value);
            }
            Action::Delete(path, value) => {
                if let Some(old) = before.get(&path) {
                    let left = set_update(old, &value, false)?;
                    let empty = left
                        .as_object()
                        .and_then(|o| o.values().next())
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty);
                    if empty {
                        after.remove(&path);
                    } else {
                        after.insert(path, left);
                    }
                }
            }
        }
    }
    Ok(after)
}

fn evaluate(before: &Item, operand: &Operand) -> Result<Value, Unevaluable> {
    match operand {
        Operand::Value(v) => Ok(v.clone()),
        Operand::Path(path) => before
            .get(path)
            .cloned()
            .ok_or_else(|| Unevaluable(format!("{path} is not in the item"))),
        Operand::IfNotExists(path, default) => match before.get(path) {
            Some(v) => Ok(v.clone()),
            None => evaluate(before, default),
        },
        Operand::ListAppend(first, second) => {
            let list = |v: Value| match v.get("L").and_then(Value::as_array) {
                Some(l) => Ok(l.clone()),
                None => Err(Unevaluable("list_append of a non-list".into())),
            };
            let mut joined = list(evaluate(before, first)?)?;
            joined.extend(list(evaluate(before, second)?)?);
            Ok(serde_json::json!({ "L": joined }))
        }
    }
}

fn number(value: &Value) -> Result<&str, Unevaluable> {
    value
        .get("N")
        .and_then(Value::as_str)
        .ok_or_else(|| Unevaluable("arithmetic on a non-number".into()))
}

fn arithmetic(left: &Value, op: char, right: &Value) -> Result<Value, Unevaluable> {
    let (a, b) = (number(left)?, number(right)?);
    let sign = if op == '-' { -1 } else { 1 };
    let result = match (a.parse::<i128>(), b.parse::<i128>()) {
        (Ok(a), Ok(b)) => (a + sign * b).to_string(),
        _ => {
            let parse = |n: &str| {
                n.parse::<f64>()
                    .map_err(|_| Unevaluable(format!("number {n}")))
            };
            (parse(a)? + sign as f64 * parse(b)?).to_string()
        }
    };
    Ok(serde_json::json!({ "N": result }))
}

/// `ADD` (union) or `DELETE` (difference) of one set to another of the same type.
fn set_update(old: &Value, operand: &Value, add: bool) -> Result<Value, Unevaluable> {
    let set = |v: &Value| {
        v.as_object()
            .and_then(|o| o.iter().next())
            .filter(|(kind, _)| matches!(kind.as_str(), "SS" | "NS" | "BS"))
            .and_then(|(kind, list)| Some((kind.clone(), list.as_array()?.clone())))
            .ok_or_else(|| Unevaluable("ADD or DELETE of a non-set".into()))
    };
    let (kind, mut elements) = set(old)?;
    let (other_kind, others) = set(operand)?;
    if kind != other_kind {
        return Err(Unevaluable("ADD or DELETE of sets of two types".into()));
    }
    if add {
        for e in others {
            if !elements.contains(&e) {
                elements.push(e);
            }
        }
    } else {
        elements.retain(|e| !others.contains(e));
    }
    let mut out = Map::new();
    out.insert(kind, Value::Array(elements));
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn item(value: Value) -> Item {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_stores_expressions_are_evaluated() {
        let before = item(json!({
            "deviceId": {"S": "d"}, "status": {"S": "claimed"}, "dueMinute": {"S": "22:00"},
            "useCount": {"N": "2"},
        }));
        let names = map(json!({"#status": "status", "#dueMinute": "dueMinute",
            "#useCount": "useCount", "#expireAt": "expireAt"}));
        let values = map(json!({":outcome": {"S": "sent"}, ":amount": {"N": "3"},
            ":expireAt": {"N": "99"}}));
        let after = apply_update(
            &before,
            "SET #status = :outcome, #expireAt = :expireAt REMOVE #dueMinute",
            &names,
            &values,
        )
        .unwrap();
        assert_eq!(
            after,
            item(json!({"deviceId": {"S": "d"}, "status": {"S": "sent"},
                "useCount": {"N": "2"}, "expireAt": {"N": "99"}}))
        );
        let after = apply_update(
            &before,
            "ADD #useCount :amount SET #expireAt = :expireAt",
            &names,
            &values,
        )
        .unwrap();
        assert_eq!(after["useCount"], json!({"N": "5"}));
        assert_eq!(after["expireAt"], json!({"N": "99"}));
    }

    #[test]
    fn if_not_exists_arithmetic_and_sets() {
        let before = item(json!({"k": {"S": "d"}, "n": {"N": "10"}, "tags": {"SS": ["a", "b"]}}));
        let names = map(json!({}));
        let values = map(
            json!({":one": {"N": "1"}, ":zero": {"N": "0"}, ":c": {"SS": ["c", "a"]},
            ":a": {"SS": ["a", "b"]}, ":l": {"L": [{"S": "x"}]}}),
        );
        let after = apply_update(
            &before,
            "set m = if_not_exists(m, :zero), n = n - :one, o = if_not_exists(n, :zero) add tags :c",
            &names,
            &values,
        )
        .unwrap();
        assert_eq!(after["m"], json!({"N": "0"}));
        assert_eq!(after["n"], json!({"N": "9"}));
        assert_eq!(
            after["o"],
            json!({"N": "10"}),
            "operands read the before-image"
        );
        assert_eq!(after["tags"], json!({"SS": ["a", "b", "c"]}));
        let after = apply_update(
            &before,
            "DELETE tags :a SET l = list_append(:l, :l)",
            &names,
            &values,
        )
        .unwrap();
        assert!(!after.contains_key("tags"), "an emptied set is removed");
        assert_eq!(after["l"], json!({"L": [{"S": "x"}, {"S": "x"}]}));
    }

    #[test]
    fn what_it_cannot_evaluate_is_said_and_the_mentioned_attributes_listed() {
        let before = item(json!({"k": {"S": "d"}}));
        let names = map(json!({"#m": "meta", "#d": "dueMinute"}));
        let values = map(json!({":v": {"S": "x"}}));
        for expression in [
            "SET #m.inner = :v",
            "SET a = missing",
            "SET a = :nope",
            "SET a = size(b)",
            "SET a :v",
            "FROB a",
        ] {
            assert!(
                apply_update(&before, expression, &names, &values).is_err(),
                "{expression}"
            );
        }
        assert_eq!(
            mentioned_attributes(
                "SET #m.inner = :v, #d = if_not_exists(x, :v) REMOVE l[0]",
                &names
            ),
            ["meta", "dueMinute", "x", "l"]
        );
    }
}
