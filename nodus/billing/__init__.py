"""Money: the double-entry ledger (grants, holds, charges, releases) and what it is shown as."""
