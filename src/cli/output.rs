//! Listings as kubectl prints them: `-o table|wide|json|yaml|name` and `--no-headers`, with
//! column widths computed from the data.

use clap::{Args, ValueEnum};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Columns for a person.
    Table,
    /// The table with more columns.
    Wide,
    /// kubectl's List in JSON: `apiVersion: v1`, `kind: List`, the entries as `items`.
    Json,
    /// kubectl's List in YAML.
    Yaml,
    /// One `kind.group/name` per line, for scripts (as kubectl -o name).
    Name,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: OutputFormat,
    /// Leave out the table's header line.
    #[arg(long)]
    pub no_headers: bool,
}

/// An entry of a listing.
pub trait Listed: Serialize {
    /// The table's columns; `wide` adds some.
    fn headers(wide: bool) -> Vec<&'static str>;
    /// This entry's cells, one per header.
    fn cells(&self, wide: bool) -> Vec<String>;
    /// kubectl's `kind.group/name` (`kind/name` for the core group).
    fn qualified_name(&self) -> String;
}

/// kubectl's `List` (what `kubectl get -o json|yaml` prints): every listing's `-o json|yaml`,
/// with what the listing says beside its entries (`extra`, flattened) after `items`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeList<'a, T: Serialize, E: Serialize> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ListMeta,
    items: &'a [T],
    #[serde(flatten)]
    extra: E,
}

/// A List's `metadata`: empty, as kubectl's for a listing of several kinds.
#[derive(Serialize)]
struct ListMeta {}

/// Nothing beside a List's items.
#[derive(Serialize)]
pub struct NoExtra {}

impl<'a, T: Serialize, E: Serialize> KubeList<'a, T, E> {
    pub fn new(items: &'a [T], extra: E) -> Self {
        KubeList {
            api_version: "v1",
            kind: "List",
            metadata: ListMeta {},
            items,
            extra,
        }
    }

    /// As YAML when `yaml`, else as JSON.
    pub fn to_text(&self, yaml: bool) -> String {
        if yaml {
            serde_saphyr::to_string(self).expect("a listing serializes")
        } else {
            let mut json = serde_json::to_string_pretty(self).expect("a listing serializes");
            json.push('\n');
            json
        }
    }
}

/// `entries` in `args`' format; `empty` is what a table says when there are none.
pub fn render<T: Listed>(entries: &[T], args: &OutputArgs, empty: &str) -> String {
    match args.output {
        OutputFormat::Json | OutputFormat::Yaml => {
            KubeList::new(entries, NoExtra {}).to_text(args.output == OutputFormat::Yaml)
        }
        OutputFormat::Name => entries
            .iter()
            .map(|e| format!("{}\n", e.qualified_name()))
            .collect(),
        OutputFormat::Table | OutputFormat::Wide if entries.is_empty() => format!("{empty}\n"),
        OutputFormat::Table | OutputFormat::Wide => {
            let wide = args.output == OutputFormat::Wide;
            let header = (!args.no_headers).then(|| T::headers(wide));
            let rows: Vec<Vec<String>> = entries.iter().map(|e| e.cells(wide)).collect();
            columns(header, &rows)
        }
    }
}

/// Rows in columns as wide as their widest cell, three spaces apart (as kubectl), the last
/// column unpadded.
pub fn columns(header: Option<Vec<&'static str>>, rows: &[Vec<String>]) -> String {
    let header: Option<Vec<String>> = header.map(|h| h.into_iter().map(str::to_owned).collect());
    let all: Vec<&Vec<String>> = header.iter().chain(rows).collect();
    let count = all.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|i| {
            all.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in all {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count() + 3;
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Fruit {
        name: String,
        colour: String,
    }

    impl Listed for Fruit {
        fn headers(wide: bool) -> Vec<&'static str> {
            if wide {
                vec!["NAME", "COLOUR"]
            } else {
                vec!["NAME"]
            }
        }
        fn cells(&self, wide: bool) -> Vec<String> {
            let mut cells = vec![self.name.clone()];
            if wide {
                cells.push(self.colour.clone());
            }
            cells
        }
        fn qualified_name(&self) -> String {
            format!("fruit.example.org/{}", self.name)
        }
    }

    fn fruit() -> Vec<Fruit> {
        ["apple", "fig"]
            .into_iter()
            .zip(["green", "purple"])
            .map(|(name, colour)| Fruit {
                name: name.into(),
                colour: colour.into(),
            })
            .collect()
    }

    fn args(output: OutputFormat, no_headers: bool) -> OutputArgs {
        OutputArgs { output, no_headers }
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let out = render(&fruit(), &args(OutputFormat::Wide, false), "none");
        assert_eq!(out, "NAME    COLOUR\napple   green\nfig     purple\n");
        let out = render(&fruit(), &args(OutputFormat::Wide, true), "none");
        assert_eq!(out, "apple   green\nfig     purple\n");
        let out = render(&fruit(), &args(OutputFormat::Table, false), "none");
        assert_eq!(out, "NAME\napple\nfig\n");
        let wide_cell = columns(Some(vec!["A", "B"]), &[vec!["ééé".into(), "x".into()]]);
        assert_eq!(wide_cell, "A     B\nééé   x\n");
    }

    #[test]
    fn name_json_and_yaml_carry_every_entry() {
        assert_eq!(
            render(&fruit(), &args(OutputFormat::Name, false), "none"),
            "fruit.example.org/apple\nfruit.example.org/fig\n"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&fruit(), &args(OutputFormat::Json, false), "")).unwrap();
        assert_eq!(json["apiVersion"], "v1");
        assert_eq!(json["kind"], "List");
        assert_eq!(
            json["items"][1],
            serde_json::json!({"name": "fig", "colour": "purple"})
        );
        let yaml: serde_json::Value =
            serde_saphyr::from_str(&render(&fruit(), &args(OutputFormat::Yaml, false), ""))
                .unwrap();
        assert_eq!(yaml, json);
    }

    #[test]
    fn nothing_is_said_in_each_format() {
        let none: [Fruit; 0] = [];
        assert_eq!(
            render(&none, &args(OutputFormat::Table, true), "Nothing."),
            "Nothing.\n"
        );
        let empty =
            serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []});
        let json: serde_json::Value =
            serde_json::from_str(&render(&none, &args(OutputFormat::Json, false), "")).unwrap();
        assert_eq!(json, empty);
        let yaml: serde_json::Value =
            serde_saphyr::from_str(&render(&none, &args(OutputFormat::Yaml, false), "")).unwrap();
        assert_eq!(yaml, empty);
        assert_eq!(render(&none, &args(OutputFormat::Name, false), ""), "");
    }
}
