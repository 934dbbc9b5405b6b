from vlbind.cli import main

raise SystemExit(main())
