// The store interface shared by the SQLite and PostgreSQL backends.
export {};
