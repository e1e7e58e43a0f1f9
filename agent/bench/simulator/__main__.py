from agent.bench.simulator.app import main

raise SystemExit(main())
