-- Recovery keys (docs/communities.md, "Who owns a community"). A provisioned account is
-- created with the creator's recovery key (a did:key, public) as the first rotation key of its
-- DID; a pending provisioning keeps it so that a retry asks for the same. The service may hold
-- a rotation key of its own below it, sealed as "community_accounts.rotation_key:<did>", to
-- sign the PLC operations of a move without an e-mail token.
ALTER TABLE account_provisioning ADD COLUMN recovery_key TEXT;
ALTER TABLE community_accounts ADD COLUMN recovery_key TEXT;
ALTER TABLE community_accounts ADD COLUMN rotation_key_sealed TEXT;
