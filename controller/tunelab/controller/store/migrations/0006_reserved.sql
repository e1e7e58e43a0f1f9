-- Version 6: reserved for a migration on another branch (issue 25 takes 7); the lead replaces
-- this file with that branch's at merge. It changes nothing.
SELECT 1;
