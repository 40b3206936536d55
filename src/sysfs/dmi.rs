//! The platform from DMI (`/sys/class/dmi/id/`): which cloud, and on EC2 the instance type. Read-only, under the
//! host root; no metadata service. EC2 (Nitro) puts the instance type in `product_name`; Azure shows
//! `Microsoft Corporation` / `Virtual Machine` (the VM size is not in DMI), Google `Google` / `Google Compute
//! Engine`. Firecracker guests and some containers have no DMI at all.

use crate::host::{optional, Host, ReadError};

pub const DMI_SYS_VENDOR: &str = "/sys/class/dmi/id/sys_vendor";
pub const DMI_PRODUCT_NAME: &str = "/sys/class/dmi/id/product_name";
pub const DMI_BOARD_VENDOR: &str = "/sys/class/dmi/id/board_vendor";

/// A cloud a profile can be for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cloud {
    Aws,
    Azure,
    Gcp,
}

impl Cloud {
    pub fn name(self) -> &'static str {
        match self {
            Cloud::Aws => "AWS EC2",
            Cloud::Azure => "Azure",
            Cloud::Gcp => "Google Cloud",
        }
    }
}

/// The three DMI strings, each None where the file is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dmi {
    pub sys_vendor: Option<String>,
    pub product_name: Option<String>,
    pub board_vendor: Option<String>,
}

impl Dmi {
    /// An unreadable file (other than absent) is the error: a platform not read is not "no platform".
    pub fn read(host: &Host) -> Result<Dmi, ReadError> {
        let read = |p: &str| -> Result<Option<String>, ReadError> {
            Ok(optional(host.read_value(p))?
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty()))
        };
        Ok(Dmi {
            sys_vendor: read(DMI_SYS_VENDOR)?,
            product_name: read(DMI_PRODUCT_NAME)?,
            board_vendor: read(DMI_BOARD_VENDOR)?,
        })
    }

    /// The cloud the vendor strings name (the board vendor as a second witness: EC2 bare-metal instances
    /// keep the server maker in `sys_vendor` on some types).
    pub fn cloud(&self) -> Option<Cloud> {
        let names = |want: &[&str]| {
            [&self.sys_vendor, &self.board_vendor]
                .into_iter()
                .flatten()
                .any(|v| want.contains(&v.as_str()))
        };
        if names(&["Amazon EC2"]) {
            Some(Cloud::Aws)
        } else if names(&["Microsoft Corporation"])
            && self.product_name.as_deref() == Some("Virtual Machine")
        {
            Some(Cloud::Azure)
        } else if names(&["Google"]) {
            Some(Cloud::Gcp)
        } else {
            None
        }
    }

    /// The EC2 instance type (`p5en.48xlarge`): `product_name` on an EC2 platform, when it has the form
    /// `family.size`.
    pub fn instance_type(&self) -> Option<&str> {
        let p = self.product_name.as_deref()?;
        (self.cloud() == Some(Cloud::Aws)
            && p.split_once('.')
                .is_some_and(|(f, s)| !f.is_empty() && !s.is_empty() && !p.contains(' ')))
        .then_some(p)
    }

    /// `sys_vendor "Amazon EC2", product_name "p5en.48xlarge", board_vendor "Amazon EC2"`, or what is absent.
    pub fn describe(&self) -> String {
        let show = |k: &str, v: &Option<String>| match v {
            Some(v) => format!("{k} {v:?}"),
            None => format!("{k} absent"),
        };
        [
            show("sys_vendor", &self.sys_vendor),
            show("product_name", &self.product_name),
            show("board_vendor", &self.board_vendor),
        ]
        .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dmi(v: &str, p: &str, b: &str) -> Dmi {
        let o = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Dmi {
            sys_vendor: o(v),
            product_name: o(p),
            board_vendor: o(b),
        }
    }

    #[test]
    fn clouds_and_instance_types() {
        let ec2 = dmi("Amazon EC2", "p5en.48xlarge", "Amazon EC2");
        assert_eq!(ec2.cloud(), Some(Cloud::Aws));
        assert_eq!(ec2.instance_type(), Some("p5en.48xlarge"));
        let azure = dmi(
            "Microsoft Corporation",
            "Virtual Machine",
            "Microsoft Corporation",
        );
        assert_eq!(azure.cloud(), Some(Cloud::Azure));
        assert_eq!(azure.instance_type(), None);
        let gcp = dmi("Google", "Google Compute Engine", "Google");
        assert_eq!(gcp.cloud(), Some(Cloud::Gcp));
        // A Microsoft-made server that is no Azure VM, a bare-metal box, no DMI at all.
        assert_eq!(
            dmi("Microsoft Corporation", "Surface Pro", "").cloud(),
            None
        );
        assert_eq!(
            dmi("Supermicro", "SYS-821GE-TNHR", "Supermicro").cloud(),
            None
        );
        assert_eq!(Dmi::default().cloud(), None);
        assert_eq!(dmi("Amazon EC2", "Not Specified", "").instance_type(), None);
    }
}
