-- Members whose account is not active (core table account_status, filled by the network
-- sync: docs/sync.md) are hidden from member lists and from `member_count`, and kept.
-- These triggers keep `member_count` equal to the number of members with an active
-- account, whichever path changes the members or the account status (a member removed
-- while deactivated: the command's -1 is balanced here, since they were not counted).
CREATE TRIGGER account_inactive_uncounts AFTER INSERT ON account_status BEGIN
    UPDATE communities SET member_count = member_count - 1
    WHERE did IN (SELECT community_did FROM members WHERE member_did = NEW.did);
END;
CREATE TRIGGER account_active_counts AFTER DELETE ON account_status BEGIN
    UPDATE communities SET member_count = member_count + 1
    WHERE did IN (SELECT community_did FROM members WHERE member_did = OLD.did);
END;
CREATE TRIGGER inactive_member_removed AFTER DELETE ON members
WHEN EXISTS (SELECT 1 FROM account_status WHERE did = OLD.member_did) BEGIN
    UPDATE communities SET member_count = member_count + 1 WHERE did = OLD.community_did;
END;
CREATE TRIGGER inactive_member_added AFTER INSERT ON members
WHEN EXISTS (SELECT 1 FROM account_status WHERE did = NEW.member_did) BEGIN
    UPDATE communities SET member_count = member_count - 1 WHERE did = NEW.community_did;
END;
