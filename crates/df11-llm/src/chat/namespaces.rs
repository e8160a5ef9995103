//! Keeps a template from building a cycle of `namespace()` objects.
//!
//! A namespace is the one mutable value of the template language, and minijinja renders,
//! serializes and compares it by walking its contents: after `{% set ns.me = ns %}`, rendering
//! `ns` recurses until the stack overflows, which aborts the process (a model folder's template
//! could stop the server on its first request). So a template may create a namespace only as
//! `{% set name = namespace(...) %}` and use such a name only to read or assign its attributes
//! (`name.attr`, `name['key']`, `{% set name.attr = ... %}`): a namespace then never becomes a
//! value that could be stored anywhere, and no namespace can contain one. Chat templates use
//! namespaces this way (a few flags and counters); anything else is refused before rendering.

use std::collections::HashSet;

use minijinja::machinery::{ast, parse, WhitespaceConfig};
use minijinja::{Error, ErrorKind};

/// Refuses `source` if it uses a namespace other than through its attributes.
pub(super) fn check(source: &str) -> Result<(), Error> {
    let whitespace = WhitespaceConfig {
        keep_trailing_newline: false,
        lstrip_blocks: true,
        trim_blocks: true,
    };
    // A template that does not parse is reported by the compiler itself.
    let Ok(root) = parse(source, "chat", Default::default(), whitespace) else {
        return Ok(());
    };
    let mut names = HashSet::new();
    collect(&root, &mut names);
    let mut walk = Walk {
        names,
        problem: None,
    };
    walk.stmt(&root);
    match walk.problem {
        None => Ok(()),
        Some(what) => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "{what}: a chat template may only use a namespace through its attributes \
                 (`ns.attr`, `{{% set ns.attr = ... %}}`), so that no namespace can contain one"
            ),
        )),
    }
}

/// `{% set name = namespace(...) %}`: the name.
fn namespace_set<'a>(set: &ast::Set<'a>) -> Option<&'a str> {
    match (&set.target, &set.expr) {
        (ast::Expr::Var(v), ast::Expr::Call(c)) if is_namespace(&c.expr) => Some(v.id),
        _ => None,
    }
}

fn is_namespace(e: &ast::Expr<'_>) -> bool {
    matches!(e, ast::Expr::Var(v) if v.id == "namespace")
}

/// Every name a `{% set name = namespace(...) %}` binds, anywhere in the template.
fn collect<'a>(stmt: &ast::Stmt<'a>, names: &mut HashSet<&'a str>) {
    if let ast::Stmt::Set(set) = stmt {
        names.extend(namespace_set(set));
    }
    for child in children(stmt) {
        collect(child, names);
    }
}

/// The statements directly inside `stmt`.
fn children<'s, 'a>(stmt: &'s ast::Stmt<'a>) -> Vec<&'s ast::Stmt<'a>> {
    use ast::Stmt as S;
    let lists: Vec<&Vec<ast::Stmt<'a>>> = match stmt {
        S::Template(t) => vec![&t.children],
        S::ForLoop(f) => vec![&f.body, &f.else_body],
        S::IfCond(i) => vec![&i.true_body, &i.false_body],
        S::WithBlock(w) => vec![&w.body],
        S::SetBlock(s) => vec![&s.body],
        S::AutoEscape(a) => vec![&a.body],
        S::FilterBlock(f) => vec![&f.body],
        S::Block(b) => vec![&b.body],
        S::Macro(m) => vec![&m.body],
        S::CallBlock(c) => vec![&c.macro_decl.body],
        _ => vec![],
    };
    lists.into_iter().flatten().collect()
}

struct Walk<'a> {
    /// Names bound to a namespace somewhere.
    names: HashSet<&'a str>,
    /// The first use that is refused.
    problem: Option<String>,
}

impl<'a> Walk<'a> {
    fn refuse(&mut self, what: String) {
        self.problem.get_or_insert(what);
    }

    fn stmt(&mut self, stmt: &ast::Stmt<'a>) {
        use ast::Stmt as S;
        match stmt {
            S::Set(set) => match (&set.target, namespace_set(set)) {
                // The one way to make a namespace; its arguments are values like any other.
                (_, Some(_)) => {
                    if let ast::Expr::Call(c) = &set.expr {
                        self.args(&c.args);
                    }
                }
                // `{% set ns.attr = value %}`: `ns` may be a namespace, `value` may not.
                (ast::Expr::GetAttr(a), None) => {
                    self.object(&a.expr);
                    self.expr(&set.expr);
                }
                (target, None) => {
                    self.target(target);
                    self.expr(&set.expr);
                }
            },
            S::EmitExpr(e) => self.expr(&e.expr),
            S::ForLoop(f) => {
                self.target(&f.target);
                self.expr(&f.iter);
                if let Some(e) = &f.filter_expr {
                    self.expr(e);
                }
            }
            S::IfCond(i) => self.expr(&i.expr),
            S::WithBlock(w) => {
                for (target, value) in &w.assignments {
                    self.target(target);
                    self.expr(value);
                }
            }
            S::SetBlock(s) => {
                self.target(&s.target);
                if let Some(f) = &s.filter {
                    self.expr(f);
                }
            }
            S::AutoEscape(a) => self.expr(&a.enabled),
            S::FilterBlock(f) => self.expr(&f.filter),
            S::Extends(e) => self.expr(&e.name),
            S::Include(i) => self.expr(&i.name),
            S::Import(i) => self.expr(&i.expr),
            S::FromImport(i) => self.expr(&i.expr),
            S::Macro(m) => self.macro_decl(m),
            S::CallBlock(c) => {
                self.call(&c.call);
                self.macro_decl(&c.macro_decl);
            }
            S::Do(d) => self.call(&d.call),
            _ => {}
        }
        for child in children(stmt) {
            self.stmt(child);
        }
    }

    fn macro_decl(&mut self, m: &ast::Macro<'a>) {
        for a in &m.args {
            self.target(a);
        }
        for d in &m.defaults {
            self.expr(d);
        }
    }

    /// An assignment target: names are bound, not read, but an attribute's object is read.
    fn target(&mut self, e: &ast::Expr<'a>) {
        match e {
            ast::Expr::Var(_) => {}
            ast::Expr::List(l) => l.items.iter().for_each(|i| self.target(i)),
            other => self.expr(other),
        }
    }

    /// The object of `.attr` or `[key]`: the one place a namespace name may be read.
    fn object(&mut self, e: &ast::Expr<'a>) {
        match e {
            ast::Expr::Var(v) if self.names.contains(v.id) => {}
            other => self.expr(other),
        }
    }

    fn call(&mut self, c: &ast::Call<'a>) {
        if is_namespace(&c.expr) {
            self.refuse("`namespace()` outside `{% set name = namespace(...) %}`".into());
        }
        self.expr(&c.expr);
        self.args(&c.args);
    }

    fn args(&mut self, args: &[ast::CallArg<'a>]) {
        for a in args {
            match a {
                ast::CallArg::Pos(e)
                | ast::CallArg::Kwarg(_, e)
                | ast::CallArg::PosSplat(e)
                | ast::CallArg::KwargSplat(e) => self.expr(e),
            }
        }
    }

    fn expr(&mut self, e: &ast::Expr<'a>) {
        use ast::Expr as E;
        match e {
            E::Var(v) => {
                if self.names.contains(v.id) {
                    self.refuse(format!("namespace `{}` used as a value", v.id));
                } else if v.id == "namespace" {
                    self.refuse("`namespace` used as a value".into());
                }
            }
            E::Const(_) => {}
            E::Slice(s) => {
                self.expr(&s.expr);
                for x in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(x);
                }
            }
            E::UnaryOp(u) => self.expr(&u.expr),
            E::BinOp(b) => {
                self.expr(&b.left);
                self.expr(&b.right);
            }
            E::Compare(c) => {
                self.expr(&c.expr);
                c.ops.iter().for_each(|op| self.expr(&op.expr));
            }
            E::IfExpr(i) => {
                self.expr(&i.test_expr);
                self.expr(&i.true_expr);
                if let Some(f) = &i.false_expr {
                    self.expr(f);
                }
            }
            E::Filter(f) => {
                if let Some(x) = &f.expr {
                    self.expr(x);
                }
                self.args(&f.args);
            }
            E::Test(t) => {
                self.expr(&t.expr);
                self.args(&t.args);
            }
            E::GetAttr(g) => self.object(&g.expr),
            E::GetItem(g) => {
                self.object(&g.expr);
                self.expr(&g.subscript_expr);
            }
            E::Call(c) => self.call(c),
            E::List(l) => l.items.iter().for_each(|i| self.expr(i)),
            E::Map(m) => m.keys.iter().chain(&m.values).for_each(|x| self.expr(x)),
        }
    }
}
