//! `#[derive(Data)]`: implements Floe's `Data` trait (the record codec, the text form of sinks, the
//! stable key hash and the schema that state evolution reads) for a struct or an enum whose fields
//! are all `Data`.
//!
//! The generated codec is the one a hand-written implementation would be: fields back to back in
//! declaration order, an enum's variant as a varint index before its fields. So a derived record
//! costs what a hand-written codec costs, and the schema (`Data::schema`) names every field, so state
//! written by one version of a type can be read into another that added or removed fields.
//!
//! Attributes:
//! - `#[data(default)]` on a field: when state written without this field is restored, the field
//!   is `Default::default()`; `#[data(default = "path::to::fn")]` calls that function instead.
//!   Without it, a restore of state that lacks the field is refused, naming the type and field.
//! - `#[data(crate = "path")]` on the type: where the `Data` trait lives, when the crate depends on
//!   Floe under another name (by default `floe_datastream`, or `floe::datastream` in a crate that
//!   depends on the `floe` crate).

use proc_macro::TokenStream;
use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::{Data as Body, DeriveInput, Fields, Ident, LitStr, Path, Type, parse_macro_input, parse_quote};

#[proc_macro_derive(Data, attributes(data))]
pub fn derive_data(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Where the `Data` trait is, as the deriving crate names it.
fn floe_path(input: &DeriveInput) -> syn::Result<Path> {
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("data")) {
        let mut path = None;
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                path = Some(meta.value()?.parse::<LitStr>()?.parse::<Path>()?);
                Ok(())
            } else {
                Err(meta.error("expected `crate = \"path\"` on the type"))
            }
        })?;
        if let Some(path) = path {
            return Ok(path);
        }
    }
    // floe-datastream names itself `floe_datastream` too (`extern crate self`), so this also
    // serves its own code, doctests and tests.
    Ok(match (crate_name("floe-datastream"), crate_name("floe")) {
        (Ok(FoundCrate::Name(name)), _) => {
            let id = Ident::new(&name, Span::call_site());
            parse_quote!(::#id)
        }
        (Ok(FoundCrate::Itself), _) | (Err(_), Err(_)) => parse_quote!(::floe_datastream),
        (Err(_), Ok(FoundCrate::Name(name))) => {
            let id = Ident::new(&name, Span::call_site());
            parse_quote!(::#id::datastream)
        }
        (Err(_), Ok(FoundCrate::Itself)) => parse_quote!(::floe::datastream),
    })
}

/// A field as the generated code reaches it.
struct Field {
    /// The name in the schema: the field's name, or its position in a tuple struct or variant.
    name: String,
    /// The expression of the field on `self` (`self.name`, `self.0`) or, in a variant, its binding.
    access: Tokens,
    /// The same field of `other` in `data_eq`.
    other: Tokens,
    /// A variant's bindings of the field (of `self`, of `other`) in a `match` pattern; `access`
    /// and `other` dereference them, so every use takes `&access` as with a struct's fields.
    binds: Option<(Ident, Ident)>,
    ty: Type,
    /// The encoding of the value a restore gives the field when the stored data lacks it.
    default: Option<Tokens>,
}

fn fields_of(fields: &Fields, in_variant: bool, floe: &Path) -> syn::Result<Vec<Field>> {
    let mut out = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let name = f
            .ident
            .as_ref()
            .map_or_else(|| i.to_string(), ToString::to_string);
        let (access, other, binds) = if in_variant {
            let (a, b) = (format_ident!("__a_{}", name), format_ident!("__b_{}", name));
            (quote!((*#a)), quote!((*#b)), Some((a, b)))
        } else {
            match &f.ident {
                Some(id) => (quote!(self.#id), quote!(other.#id), None),
                None => {
                    let index = syn::Index::from(i);
                    (quote!(self.#index), quote!(other.#index), None)
                }
            }
        };
        let ty = f.ty.clone();
        let mut default = None;
        for attr in f.attrs.iter().filter(|a| a.path().is_ident("data")) {
            attr.parse_nested_meta(|meta| {
                if !meta.path.is_ident("default") {
                    return Err(meta.error("expected `default` or `default = \"path::to::fn\"` on a field"));
                }
                let value = if meta.input.peek(syn::Token![=]) {
                    let func = meta.value()?.parse::<LitStr>()?.parse::<Path>()?;
                    quote!(#func())
                } else {
                    quote!(<#ty as ::core::default::Default>::default())
                };
                default = Some(quote!({
                    let mut bytes = ::std::vec::Vec::new();
                    #floe::Data::encode(&#value, &mut bytes);
                    ::core::option::Option::Some(bytes)
                }));
                Ok(())
            })?;
        }
        out.push(Field {
            name,
            access,
            other,
            binds,
            ty,
            default,
        });
    }
    Ok(out)
}

/// `Field::new(...)` of the schema, for each field.
fn schema_fields(fields: &[Field], floe: &Path) -> Tokens {
    let items = fields.iter().map(|f| {
        let (name, ty) = (&f.name, &f.ty);
        let default = f
            .default
            .clone()
            .unwrap_or_else(|| quote!(::core::option::Option::None));
        quote!(#floe::data::Field::new(#name, <#ty as #floe::Data>::schema(), #default))
    });
    quote!(::std::vec![#(#items),*])
}

/// The pattern binding a variant's fields (`Self::V { a: __a_a }`, `Self::V(__a_0)`).
fn variant_pattern(
    variant: &Ident,
    fields: &Fields,
    parsed: &[Field],
    side: fn(&Field) -> Option<&Ident>,
) -> Tokens {
    match fields {
        Fields::Named(named) => {
            let binds = named.named.iter().zip(parsed).map(|(f, p)| {
                let (id, bind) = (&f.ident, side(p));
                quote!(#id: #bind)
            });
            quote!(Self::#variant { #(#binds),* })
        }
        Fields::Unnamed(_) => {
            let binds = parsed.iter().map(side);
            quote!(Self::#variant(#(#binds),*))
        }
        Fields::Unit => quote!(Self::#variant),
    }
}

/// The value built from decoded fields (`Self { a: .. }`, `Self(..)`, `Self::V { .. }`).
fn construct(target: Tokens, fields: &Fields, parsed: &[Field], floe: &Path) -> Tokens {
    let values = parsed.iter().map(|f| {
        let ty = &f.ty;
        quote!(<#ty as #floe::Data>::decode(input)?)
    });
    match fields {
        Fields::Named(named) => {
            let names = named.named.iter().map(|f| &f.ident);
            quote!(#target { #(#names: #values),* })
        }
        Fields::Unnamed(_) => quote!(#target(#(#values),*)),
        Fields::Unit => target,
    }
}

/// Writes each field's text as a field (text escaped), TAB-separated.
fn text_fields(parsed: &[Field], floe: &Path, first: bool) -> Tokens {
    let writes = parsed.iter().enumerate().map(|(i, f)| {
        let access = &f.access;
        let tab = (i > 0 || !first).then(|| quote!(out.push(b'\t');));
        quote!(#tab #floe::Data::write_field(&#access, out);)
    });
    quote!(#(#writes)*)
}

fn expand(mut input: DeriveInput) -> syn::Result<Tokens> {
    let floe = floe_path(&input)?;
    let name = input.ident.clone();
    let type_name = name.to_string();
    for param in input.generics.type_params_mut() {
        param.bounds.push(parse_quote!(#floe::Data));
    }
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let body = match &input.data {
        Body::Struct(s) => expand_struct(&s.fields, &type_name, &floe)?,
        Body::Enum(e) => expand_enum(e, &type_name, &floe)?,
        Body::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "#[derive(Data)] takes a struct or an enum, not a union",
            ));
        }
    };
    Ok(quote! {
        impl #impl_generics #floe::Data for #name #ty_generics #where_clause {
            #body
        }
    })
}

fn expand_struct(fields: &Fields, type_name: &str, floe: &Path) -> syn::Result<Tokens> {
    let parsed = fields_of(fields, false, floe)?;
    let access: Vec<&Tokens> = parsed.iter().map(|f| &f.access).collect();
    let other: Vec<&Tokens> = parsed.iter().map(|f| &f.other).collect();
    let decoded = construct(quote!(Self), fields, &parsed, floe);
    let text = text_fields(&parsed, floe, true);
    let schema_fields = schema_fields(&parsed, floe);
    Ok(quote! {
        #[inline]
        fn encode(&self, out: &mut ::std::vec::Vec<u8>) {
            #(#floe::Data::encode(&#access, out);)*
        }
        #[inline]
        fn decode(input: &mut &[u8]) -> #floe::Result<Self> {
            ::core::result::Result::Ok(#decoded)
        }
        #[inline]
        fn decode_into(&mut self, input: &mut &[u8]) -> #floe::Result<()> {
            #(#floe::Data::decode_into(&mut #access, input)?;)*
            ::core::result::Result::Ok(())
        }
        fn write_text(&self, out: &mut ::std::vec::Vec<u8>) {
            #text
        }
        #[inline]
        fn stable_hash(&self, h: &mut #floe::data::StableHash) {
            #(#floe::Data::stable_hash(&#access, h);)*
        }
        #[inline]
        fn data_eq(&self, other: &Self) -> bool {
            true #(&& #floe::Data::data_eq(&#access, &#other))*
        }
        fn schema() -> #floe::data::Schema {
            #floe::data::Schema::recursive::<Self>(#type_name, || #floe::data::Schema::Struct {
                name: #type_name.to_string(),
                fields: #schema_fields,
            })
        }
    })
}

fn expand_enum(e: &syn::DataEnum, type_name: &str, floe: &Path) -> syn::Result<Tokens> {
    let count = e.variants.len();
    let (mut encode, mut decode, mut text, mut hash, mut eq, mut schema) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for (index, variant) in e.variants.iter().enumerate() {
        let ident = &variant.ident;
        let variant_name = ident.to_string();
        let index = index as u64;
        let parsed = fields_of(&variant.fields, true, floe)?;
        let this = variant_pattern(ident, &variant.fields, &parsed, |f| {
            f.binds.as_ref().map(|b| &b.0)
        });
        let that = variant_pattern(ident, &variant.fields, &parsed, |f| {
            f.binds.as_ref().map(|b| &b.1)
        });
        let access: Vec<&Tokens> = parsed.iter().map(|f| &f.access).collect();
        let other: Vec<&Tokens> = parsed.iter().map(|f| &f.other).collect();
        encode.push(quote!(#this => {
            #floe::data::put_varint(out, #index);
            #(#floe::Data::encode(&#access, out);)*
        }));
        let built = construct(quote!(Self::#ident), &variant.fields, &parsed, floe);
        decode.push(quote!(#index => #built,));
        let fields_text = text_fields(&parsed, floe, false);
        text.push(quote!(#this => {
            out.extend_from_slice(#variant_name.as_bytes());
            #fields_text
        }));
        hash.push(quote!(#this => {
            h.write_u64(#index);
            #(#floe::Data::stable_hash(&#access, h);)*
        }));
        eq.push(quote!((#this, #that) => true #(&& #floe::Data::data_eq(&#access, &#other))*,));
        let fields = schema_fields(&parsed, floe);
        schema.push(quote!(#floe::data::Variant::new(#variant_name, #fields)));
    }
    // A match on a reference to an empty enum still needs an arm.
    let unreachable = (count == 0).then(|| quote!(_ => ::core::unreachable!(),));
    Ok(quote! {
        #[inline]
        fn encode(&self, out: &mut ::std::vec::Vec<u8>) {
            match self { #(#encode)* #unreachable }
        }
        #[inline]
        fn decode(input: &mut &[u8]) -> #floe::Result<Self> {
            ::core::result::Result::Ok(match #floe::data::get_varint(input)? {
                #(#decode)*
                other => return ::core::result::Result::Err(#floe::data::unknown_variant(#type_name, other, #count)),
            })
        }
        fn write_text(&self, out: &mut ::std::vec::Vec<u8>) {
            match self { #(#text)* #unreachable }
        }
        #[inline]
        fn stable_hash(&self, h: &mut #floe::data::StableHash) {
            match self { #(#hash)* #unreachable }
        }
        #[inline]
        #[allow(unreachable_patterns)]
        fn data_eq(&self, other: &Self) -> bool {
            match (self, other) { #(#eq)* _ => false }
        }
        fn schema() -> #floe::data::Schema {
            #floe::data::Schema::recursive::<Self>(#type_name, || #floe::data::Schema::Enum {
                name: #type_name.to_string(),
                variants: ::std::vec![#(#schema),*],
            })
        }
    })
}
