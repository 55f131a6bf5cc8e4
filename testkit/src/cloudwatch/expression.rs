//! CloudWatch metric math, the part the template's alarms use: `+ - * /`, comparisons, `FILL`, `MAX([...])`, `IF`.
//!
//! Semantics (AWS's metric math syntax): an operation between two time series keeps the
//! timestamps (periods) both have; with a scalar, every value of the series; a comparison gives
//! 1 or 0. `FILL(m, v)` gives every period of the evaluated range a value, `v` where `m` has
//! none. `MAX([a, b])` is the largest value at each period among the series that have one.
//! `IF(c, a, b)` takes `a` where `c` is not 0, else `b`, and leaves the period out where the
//! chosen side has no value. A division by zero leaves the period out. Anything else (another
//! function, `MAX` of a single series, which CloudWatch answers with a scalar) panics: the
//! evaluator does not guess.

use std::collections::BTreeMap;
use std::ops::Range;

#[derive(Clone, Debug, PartialEq)]
pub enum Expression {
    Number(f64),
    Id(String),
    Negate(Box<Expression>),
    Binary(Operator, Box<Expression>, Box<Expression>),
    Fill(Box<Expression>, f64),
    /// `MAX([a, b, ...])`: the largest value at each period.
    MaxOf(Vec<Expression>),
    If(Box<Expression>, Box<Expression>, Box<Expression>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    Add,
    Subtract,
    Multiply,
    Divide,
    GreaterOrEqual,
    Greater,
    LessOrEqual,
    Less,
    Equal,
    NotEqual,
}

impl Operator {
    fn apply(self, a: f64, b: f64) -> Option<f64> {
        let truth = |t: bool| Some(if t { 1.0 } else { 0.0 });
        match self {
            Operator::Add => Some(a + b),
            Operator::Subtract => Some(a - b),
            Operator::Multiply => Some(a * b),
            Operator::Divide => (b != 0.0).then(|| a / b),
            Operator::GreaterOrEqual => truth(a >= b),
            Operator::Greater => truth(a > b),
            Operator::LessOrEqual => truth(a <= b),
            Operator::Less => truth(a < b),
            Operator::Equal => truth(a == b),
            Operator::NotEqual => truth(a != b),
        }
    }
}

/// A value while evaluating: a scalar, or a series of period → value.
#[derive(Clone, Debug)]
enum Value {
    Scalar(f64),
    Series(BTreeMap<u32, f64>),
}

impl Value {
    fn at(&self, period: u32) -> Option<f64> {
        match self {
            Value::Scalar(v) => Some(*v),
            Value::Series(s) => s.get(&period).copied(),
        }
    }
}

impl Expression {
    /// Parses an alarm's `Expression`; panics, naming it, on anything outside the subset.
    pub fn parse(text: &str) -> Expression {
        let tokens = tokenize(text);
        let mut parser = Parser {
            tokens: &tokens,
            at: 0,
            text,
        };
        let expression = parser.comparison();
        assert!(
            parser.at == tokens.len(),
            "metric math {text:?}: unexpected {:?}",
            &tokens[parser.at..]
        );
        expression
    }

    /// The expression's series over `periods`; `series` gives the series of a query id.
    pub fn evaluate(
        &self,
        series: &mut dyn FnMut(&str) -> BTreeMap<u32, f64>,
        periods: &Range<u32>,
    ) -> BTreeMap<u32, f64> {
        match self.value(series, periods) {
            Value::Series(s) => s,
            Value::Scalar(v) => periods.clone().map(|k| (k, v)).collect(),
        }
    }

    fn value(
        &self,
        series: &mut dyn FnMut(&str) -> BTreeMap<u32, f64>,
        periods: &Range<u32>,
    ) -> Value {
        let per_period = |values: &[Value], f: &dyn Fn(&[Option<f64>]) -> Option<f64>| {
            if values.iter().all(|v| matches!(v, Value::Scalar(_))) {
                let args: Vec<Option<f64>> = values.iter().map(|v| v.at(0)).collect();
                return f(&args).map_or(Value::Series(BTreeMap::new()), Value::Scalar);
            }
            Value::Series(
                periods
                    .clone()
                    .filter_map(|k| {
                        let args: Vec<Option<f64>> = values.iter().map(|v| v.at(k)).collect();
                        f(&args).map(|v| (k, v))
                    })
                    .collect(),
            )
        };
        match self {
            Expression::Number(v) => Value::Scalar(*v),
            Expression::Id(id) => Value::Series(series(id)),
            Expression::Negate(inner) => {
                let inner = inner.value(series, periods);
                per_period(&[inner], &|a| a[0].map(|v| -v))
            }
            Expression::Binary(op, left, right) => {
                let values = [left.value(series, periods), right.value(series, periods)];
                per_period(&values, &|a| op.apply(a[0]?, a[1]?))
            }
            Expression::Fill(inner, with) => {
                let inner = inner.value(series, periods);
                Value::Series(
                    periods
                        .clone()
                        .map(|k| (k, inner.at(k).unwrap_or(*with)))
                        .collect(),
                )
            }
            Expression::MaxOf(items) => {
                let values: Vec<Value> = items.iter().map(|e| e.value(series, periods)).collect();
                per_period(&values, &|a| a.iter().flatten().copied().reduce(f64::max))
            }
            Expression::If(condition, then, otherwise) => {
                let values = [
                    condition.value(series, periods),
                    then.value(series, periods),
                    otherwise.value(series, periods),
                ];
                per_period(&values, &|a| if a[0]? != 0.0 { a[1] } else { a[2] })
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Number(f64),
    Name(String),
    Symbol(&'static str),
}

fn tokenize(text: &str) -> Vec<Token> {
    const SYMBOLS: [&str; 14] = [
        ">=", "<=", "==", "!=", ">", "<", "+", "-", "*", "/", "(", ")", "[", "]",
    ];
    let mut tokens = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        if rest.starts_with(',') {
            tokens.push(Token::Symbol(","));
            rest = &rest[1..];
        } else if let Some(symbol) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) {
            tokens.push(Token::Symbol(symbol));
            rest = &rest[symbol.len()..];
        } else if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let number = rest[..end]
                .parse()
                .unwrap_or_else(|_| panic!("metric math {text:?}: bad number {}", &rest[..end]));
            tokens.push(Token::Number(number));
            rest = &rest[end..];
        } else if rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            tokens.push(Token::Name(rest[..end].to_owned()));
            rest = &rest[end..];
        } else {
            panic!("metric math {text:?}: unsupported character at {rest:?}");
        }
        rest = rest.trim_start();
    }
    tokens
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    text: &'a str,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, symbol: &str) -> bool {
        if self.peek() == Some(&Token::Symbol(symbol_static(symbol))) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, symbol: &str) {
        assert!(
            self.eat(symbol),
            "metric math {:?}: expected {symbol} at {:?}",
            self.text,
            &self.tokens[self.at.min(self.tokens.len())..]
        );
    }

    fn comparison(&mut self) -> Expression {
        let left = self.additive();
        for (symbol, op) in [
            (">=", Operator::GreaterOrEqual),
            ("<=", Operator::LessOrEqual),
            ("==", Operator::Equal),
            ("!=", Operator::NotEqual),
            (">", Operator::Greater),
            ("<", Operator::Less),
        ] {
            if self.eat(symbol) {
                let right = self.additive();
                return Expression::Binary(op, Box::new(left), Box::new(right));
            }
        }
        left
    }

    fn additive(&mut self) -> Expression {
        self.left_associative(
            [("+", Operator::Add), ("-", Operator::Subtract)],
            Self::term,
        )
    }

    fn term(&mut self) -> Expression {
        self.left_associative(
            [("*", Operator::Multiply), ("/", Operator::Divide)],
            Self::unary,
        )
    }

    /// `operand (op operand)*`, folded from the left, for the two operators of one level.
    fn left_associative(
        &mut self,
        operators: [(&str, Operator); 2],
        operand: fn(&mut Self) -> Expression,
    ) -> Expression {
        let mut left = operand(self);
        while let Some(op) = operators
            .iter()
            .find_map(|(symbol, op)| self.eat(symbol).then_some(*op))
        {
            left = Expression::Binary(op, Box::new(left), Box::new(operand(self)));
        }
        left
    }

    fn unary(&mut self) -> Expression {
        if self.eat("-") {
            return Expression::Negate(Box::new(self.unary()));
        }
        self.primary()
    }

    fn primary(&mut self) -> Expression {
        let text = self.text;
        match self.tokens.get(self.at).cloned() {
            Some(Token::Number(v)) => {
                self.at += 1;
                Expression::Number(v)
            }
            Some(Token::Symbol("(")) => {
                self.at += 1;
                let inner = self.comparison();
                self.expect(")");
                inner
            }
            Some(Token::Name(name)) => {
                self.at += 1;
                if !self.eat("(") {
                    return Expression::Id(name);
                }
                let expression = match name.as_str() {
                    "FILL" => {
                        let inner = self.comparison();
                        self.expect(",");
                        let with = match self.comparison() {
                            Expression::Number(v) => v,
                            other => panic!(
                                "metric math {text:?}: FILL with {other:?} is not supported (only a number)"
                            ),
                        };
                        Expression::Fill(Box::new(inner), with)
                    }
                    "MAX" => {
                        assert!(
                            self.eat("["),
                            "metric math {text:?}: MAX of one series is a scalar, not supported"
                        );
                        let mut items = vec![self.comparison()];
                        while self.eat(",") {
                            items.push(self.comparison());
                        }
                        self.expect("]");
                        Expression::MaxOf(items)
                    }
                    "IF" => {
                        let condition = self.comparison();
                        self.expect(",");
                        let then = self.comparison();
                        self.expect(",");
                        let otherwise = self.comparison();
                        Expression::If(Box::new(condition), Box::new(then), Box::new(otherwise))
                    }
                    other => panic!("metric math {text:?}: function {other} is not supported"),
                };
                self.expect(")");
                expression
            }
            other => panic!("metric math {text:?}: unexpected {other:?}"),
        }
    }
}

fn symbol_static(symbol: &str) -> &'static str {
    [
        ">=", "<=", "==", "!=", ">", "<", "+", "-", "*", "/", "(", ")", "[", "]", ",",
    ]
    .into_iter()
    .find(|s| *s == symbol)
    .unwrap_or_else(|| panic!("not a symbol: {symbol}"))
}
