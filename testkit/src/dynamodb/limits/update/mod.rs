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

mod evaluate;
#[cfg(test)]
mod tests;

use self::evaluate::{arithmetic, evaluate, set_update};
