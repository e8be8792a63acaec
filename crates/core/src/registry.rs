//! Named, parameterised things that a front end lists, checks and builds by name: the
//! training policies, the LLM cluster schedulers, the pool schedulers.
//!
//! Each domain keeps its own declaration type (a training policy declares capabilities,
//! an LLM scheduler does not) and implements [`Spec`] on it; a [`Registry`] is a static
//! list of such declarations with the lookups every front end needs: by name with
//! "did you mean", with the parameters checked against the declared keys, and the
//! listing `apiary policies` and `apiary llm policies` print. The declaration is the one
//! place a name, a parameter's default and its meaning are written.

use crate::params::{ParamError, ParamSpec, Params, did_you_mean};

/// A declaration in a [`Registry`].
pub trait Spec: 'static {
    /// Name on the command line.
    fn name(&self) -> &'static str;
    /// One line on what it is.
    fn about(&self) -> &'static str;
    /// Its parameters, each with the default its code reads.
    fn params(&self) -> &'static [ParamSpec];
    /// Its parameter keys.
    fn keys(&self) -> Vec<&'static str> {
        self.params().iter().map(|p| p.key).collect()
    }
}

/// A static list of declarations of one kind.
#[derive(Debug)]
pub struct Registry<S: 'static> {
    /// What it holds, for messages ("policy", "LLM policy").
    pub what: &'static str,
    /// The command that lists them, for messages.
    pub listing: &'static str,
    /// The declarations, in listing order.
    pub specs: &'static [S],
}

impl<S: Spec> Registry<S> {
    /// A registry of `specs`, holding `what`, listed by `listing`.
    pub const fn new(what: &'static str, listing: &'static str, specs: &'static [S]) -> Self {
        Registry {
            what,
            listing,
            specs,
        }
    }

    /// The declaration called `name`.
    pub fn find(&self, name: &str) -> Option<&'static S> {
        self.specs.iter().find(|s| s.name() == name)
    }

    /// The names, in listing order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.specs.iter().map(|s| s.name())
    }

    /// The error for a name nothing here has, with the closest name when one is close.
    pub fn unknown(&self, name: &str) -> ParamError {
        ParamError::UnknownName {
            what: self.what,
            listing: self.listing,
            name: name.into(),
            hint: did_you_mean(name, self.names()),
            known: self.names().collect::<Vec<_>>().join(", "),
        }
    }

    /// The declaration called `name`, with `params` checked against its keys.
    pub fn lookup(&self, name: &str, params: &Params) -> Result<&'static S, ParamError> {
        let spec = self.find(name).ok_or_else(|| self.unknown(name))?;
        params.check_known(spec.name(), &spec.keys())?;
        Ok(spec)
    }
}

/// The plain declaration: a name, a line, parameters and a constructor of `T` (a
/// trait object), for kinds that declare nothing more (the LLM schedulers). Training
/// policies also declare capabilities and have their own type.
pub struct Decl<T: ?Sized + 'static> {
    /// Name on the command line.
    pub name: &'static str,
    /// One line.
    pub about: &'static str,
    /// Parameters, with the defaults the code reads.
    pub params: &'static [ParamSpec],
    /// Constructor; the parameters are checked against `params` first.
    pub build: fn(&Params) -> Result<Box<T>, ParamError>,
}

impl<T: ?Sized + 'static> std::fmt::Debug for Decl<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decl")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl<T: ?Sized + 'static> Spec for Decl<T> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn about(&self) -> &'static str {
        self.about
    }
    fn params(&self) -> &'static [ParamSpec] {
        self.params
    }
}

impl<T: ?Sized + 'static> Registry<Decl<T>> {
    /// The one called `name`, built with `params` (unknown keys are errors).
    pub fn build(&self, name: &str, params: &Params) -> Result<Box<T>, ParamError> {
        (self.lookup(name, params)?.build)(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Thing {
        name: &'static str,
        params: &'static [ParamSpec],
    }
    impl Spec for Thing {
        fn name(&self) -> &'static str {
            self.name
        }
        fn about(&self) -> &'static str {
            "a thing"
        }
        fn params(&self) -> &'static [ParamSpec] {
            self.params
        }
    }
    const SIZE: ParamSpec = ParamSpec {
        key: "size",
        default: "3",
        about: "how big",
    };
    const THINGS: Registry<Thing> = Registry::new(
        "thing",
        "apiary things",
        &[
            Thing {
                name: "round",
                params: &[SIZE],
            },
            Thing {
                name: "square",
                params: &[],
            },
        ],
    );

    trait Shape {
        fn sides(&self) -> u32;
    }
    struct Polygon(u32);
    impl Shape for Polygon {
        fn sides(&self) -> u32 {
            self.0
        }
    }
    const SIDES: ParamSpec = ParamSpec {
        key: "sides",
        default: "4",
        about: "how many",
    };
    const SHAPES: Registry<Decl<dyn Shape>> = Registry::new(
        "shape",
        "apiary shapes",
        &[Decl {
            name: "polygon",
            about: "a polygon",
            params: &[SIDES],
            build: |p| Ok(Box::new(Polygon(p.u64_in(&SIDES, 3..=100)? as u32))),
        }],
    );

    #[test]
    fn a_declaration_builds_with_its_defaults_and_checked_values() {
        assert_eq!(
            SHAPES.build("polygon", &Params::default()).unwrap().sides(),
            4
        );
        let six = Params::from_pairs(["sides=6"]).unwrap();
        assert_eq!(SHAPES.build("polygon", &six).unwrap().sides(), 6);
        let two = Params::from_pairs(["sides=2"]).unwrap();
        assert!(matches!(
            SHAPES.build("polygon", &two),
            Err(ParamError::Bad { .. })
        ));
        let typo = Params::from_pairs(["side=6"]).unwrap();
        assert!(matches!(
            SHAPES.build("polygon", &typo),
            Err(ParamError::Unknown { .. })
        ));
    }

    #[test]
    fn names_are_found_checked_and_misspellings_named() {
        let ok = Params::from_pairs(["size=4"]).unwrap();
        assert_eq!(THINGS.lookup("round", &ok).unwrap().name, "round");
        let e = THINGS.lookup("square", &ok).unwrap_err().to_string();
        assert_eq!(
            e,
            "policy 'square' has no parameter 'size' (it takes: nothing)"
        );
        let e = THINGS
            .lookup("rond", &Params::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown thing 'rond' (did you mean 'round'?) (known: round, square; see `apiary things`)"
        );
    }
}
